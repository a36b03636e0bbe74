#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Checks `data.mdb` before LMDB maps it.
///
/// LMDB trusts the meta page: if `data.mdb` is shorter than the pages it names, reading them
/// through the memory map kills the process with SIGBUS. Reading the two meta pages with `pread`
/// first turns an empty, truncated or foreign file into a clear error.
enum DataFileHeader {
    /// LMDB's meta-page magic number (`MDB_MAGIC`) and data format version (`MDB_DATA_VERSION`).
    private static let magic: UInt32 = 0xBEEF_C0DE
    private static let dataVersion: UInt32 = 1
    /// Offsets inside a meta page on a 64-bit build: a 16-byte page header, then `MDB_meta`
    /// (`mm_magic`, `mm_version`, `mm_address`, `mm_mapsize`, two 48-byte `MDB_db`,
    /// `mm_last_pg`, `mm_txnid`). The free database's `md_pad` holds the page size.
    private static let magicOffset = 16
    private static let versionOffset = 20
    private static let pageSizeOffset = 40
    private static let lastPageOffset = 136
    private static let transactionOffset = 144
    private static let metaLength = 152

    /// Throws ``PersistentDefaultsError/notAStore(path:reason:)`` when the data file at `path`
    /// (of `size` bytes) is not a complete LMDB file.
    static func check(_ path: String, size: Int, store: String) throws(PersistentDefaultsError) {
        let (header, fileSize) = try read(path, count: min(size, 2 << 16), size: size)
        if let problem = problem(header: header, fileSize: fileSize) {
            throw .notAStore(path: store, reason: problem)
        }
    }

    /// The first `count` bytes of the file at `path` (fewer when it is shorter) and its size:
    /// `size`, or larger when the file grew since the caller's stat (another process may have
    /// committed, and LMDB writes a commit's pages before the meta page that names them).
    private static func read(_ path: String, count: Int, size: Int) throws(PersistentDefaultsError) -> (
        [UInt8], Int
    ) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .fileSystem(path: path, errno: errno, operation: "open") }
        defer { close(descriptor) }
        var bytes = [UInt8](repeating: 0, count: count)
        let read = bytes.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, count, 0) }
        guard read >= 0 else { throw .fileSystem(path: path, errno: errno, operation: "read") }
        var current = stat()
        let fileSize = fstat(descriptor, &current) == 0 ? max(size, Int(current.st_size)) : size
        return (Array(bytes.prefix(read)), fileSize)
    }

    /// The integer at `offset` of `header`, nil past its end. LMDB writes its meta page in the
    /// machine's order: little-endian here.
    private static func integer<T: FixedWidthInteger & UnsignedInteger>(
        _: T.Type, at offset: Int, in header: [UInt8]
    ) -> T? {
        guard offset + MemoryLayout<T>.size <= header.count else { return nil }
        return T(bigEndianBytes: header[offset..<offset + MemoryLayout<T>.size].reversed())
    }

    /// Whether the data file at `path` (of `size` bytes) is one that LMDB is creating right now,
    /// or whose creation ended before its meta pages were complete: empty, or one page holding
    /// a new file's first meta page (transaction 0, last page 1). LMDB creates the file, then
    /// writes both meta pages in one `pwrite` while it holds the lock file's exclusive lock, so
    /// another process can see either; a full disk can leave the one page for good (LMDB refuses
    /// that file: `StoreFiles.prepare` empties it). Nothing was ever committed to such a file.
    static func isUnfinishedCreation(_ path: String, size: Int) -> Bool {
        guard size > 0 else { return true }
        guard let (header, _) = try? read(path, count: metaLength, size: size) else { return false }
        return integer(UInt32.self, at: magicOffset, in: header) == magic
            && integer(UInt32.self, at: pageSizeOffset, in: header).map(Int.init) == size
            && integer(UInt64.self, at: transactionOffset, in: header) == 0
            && integer(UInt64.self, at: lastPageOffset, in: header) == 1
    }

    /// What is wrong with a data file that starts with `header` and has `fileSize` bytes; nil
    /// when both meta pages are valid and the file holds every page the newest one names.
    static func problem(header: [UInt8], fileSize: Int) -> String? {
        func integer<T: FixedWidthInteger & UnsignedInteger>(_ type: T.Type, at offset: Int) -> T? {
            Self.integer(type, at: offset, in: header)
        }
        guard header.count >= metaLength else { return "data.mdb is truncated (\(fileSize) bytes)" }
        guard integer(UInt32.self, at: magicOffset) == magic else { return "data.mdb is not an LMDB file" }
        guard integer(UInt32.self, at: versionOffset) == dataVersion else {
            return "data.mdb has an unsupported LMDB data version"
        }
        guard let pageSize = integer(UInt32.self, at: pageSizeOffset).map(Int.init),
            pageSize >= 512, pageSize <= 1 << 16, pageSize.nonzeroBitCount == 1
        else { return "data.mdb is not an LMDB file (bad page size)" }
        guard fileSize >= 2 * pageSize, header.count >= pageSize + metaLength else {
            return "data.mdb is truncated (\(fileSize) bytes, less than its two meta pages)"
        }
        var newest: (transaction: UInt64, lastPage: UInt64)?
        for meta in [0, pageSize] {
            guard integer(UInt32.self, at: meta + magicOffset) == magic,
                let transaction = integer(UInt64.self, at: meta + transactionOffset),
                let lastPage = integer(UInt64.self, at: meta + lastPageOffset)
            else { return "data.mdb has a damaged meta page" }
            if transaction >= newest?.transaction ?? 0 { newest = (transaction, lastPage) }
        }
        guard let newest, newest.lastPage < UInt64(Int.max / pageSize) else {
            return "data.mdb has a damaged meta page"
        }
        let needed = (Int(newest.lastPage) + 1) * pageSize
        guard fileSize >= needed else {
            return "data.mdb is truncated (\(fileSize) bytes; its last commit needs \(needed))"
        }
        return nil
    }
}
