import Foundation

/// Overwrites the page that the newer meta page of the `data.mdb` at `path` names as the main
/// database's root with a fill pattern, as if a power cut had left the newest commit's root page
/// unwritten (the power-cut disk's fill). The page then claims ~26,000 entries, and LMDB's
/// lookup of a database name reads past the end of the file.
public func overwriteMainDatabaseRoot(ofDataFile path: String) throws {
    var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
    // Meta pages 0 and 1 (64-bit layout, as `DataFileHeader` reads it): the page size in the
    // free database's `md_pad` at 40, the main database's root at 128, the transaction ID at
    // 144; the newer meta page names the current root.
    func integer(_ offset: Int) -> Int {
        (0..<8).reduce(0) { $0 | Int(bytes[offset + $1]) << (8 * $1) }
    }
    let pageSize = integer(40) & 0xFFFF_FFFF
    let newer = integer(pageSize + 144) > integer(144) ? pageSize : 0
    let root = integer(newer + 128)
    for offset in 0..<pageSize {
        bytes[root * pageSize + offset] = UInt8(truncatingIfNeeded: offset * 31 + 59)
    }
    try Data(bytes).write(to: URL(fileURLWithPath: path))
}
