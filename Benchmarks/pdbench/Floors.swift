import CLMDB
import Foundation

/// An Int as the store keeps it: the `int` tag (3), then the value big-endian (9 bytes).
func taggedInt(_ value: Int) -> [UInt8] {
    var tagged = [UInt8](repeating: 3, count: 9)
    withUnsafeBytes(of: Int64(value).bigEndian) { tagged.replaceSubrange(1..<9, with: $0) }
    return tagged
}

/// LMDB doing exactly its part of a store's single-key set of an Int, through the C API, so that
/// the store's figure over it is what its Swift side costs and its figure over raw LMDB's is the
/// floor of a logged commit (`set/int/*-interleaved/raw-lmdb-logged`):
/// - a cursor finds the old value (`MDB_SET_KEY`) in the named database `values` and the 9-byte
///   tagged value replaces it where the cursor stands (`MDB_CURRENT`; a plain put the first time);
/// - one log record — 17 bytes of header (format, time, process, change count) and the change
///   (2-byte name length, name, set mark, 4-byte value length, value) — is reserved and written
///   in the named database `log` under the next big-endian sequence (`MDB_APPEND | MDB_RESERVE`);
/// - every 64th commit deletes, through a cursor from the first record, the records past the
///   newest 10,000 (the store's default `logRetention` and its pruning slack).
final class LoggedSetFloor {
    private let lmdb: RawLMDB
    private let values: MDB_dbi
    private let log: MDB_dbi
    private var sequence: UInt64 = 0
    private static let retention: UInt64 = 10_000
    private static let slack: UInt64 = 64

    init(path: String, noSync: Bool) throws {
        lmdb = try RawLMDB(path: path, noSync: noSync, namedDatabases: ["log", "meta", "values"])
        values = lmdb.named["values"] ?? 0
        log = lmdb.named["log"] ?? 0
    }

    func set(name: [UInt8], value: Int) throws {
        try lmdb.write { transaction in
            var opened: OpaquePointer?
            try checkLMDB(mdb_cursor_open(transaction, values, &opened), "mdb_cursor_open")
            guard let cursor = opened else { throw LMDBFailure(code: EINVAL, operation: "mdb_cursor_open") }
            defer { mdb_cursor_close(cursor) }
            let tagged = taggedInt(value)
            try name.withUnsafeBytes { name in
                try tagged.withUnsafeBytes { tagged in
                    var key = MDB_val(mv_size: name.count, mv_data: UnsafeMutableRawPointer(mutating: name.baseAddress))
                    var old = MDB_val()
                    let found = mdb_cursor_get(cursor, &key, &old, MDB_SET_KEY) == 0
                    var data = MDB_val(mv_size: 9, mv_data: UnsafeMutableRawPointer(mutating: tagged.baseAddress))
                    try checkLMDB(
                        mdb_cursor_put(cursor, &key, &data, found ? UInt32(MDB_CURRENT) : 0), "mdb_cursor_put")
                    sequence += 1
                    try appendRecord(transaction, name: name, value: tagged)
                }
            }
            if sequence > Self.retention, sequence % Self.slack == 0 { try prune(transaction) }
        }
    }

    private func appendRecord(
        _ transaction: OpaquePointer, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer
    ) throws {
        try withUnsafeBytes(of: sequence.bigEndian) { key in
            var keyValue = MDB_val(mv_size: 8, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
            var data = MDB_val(mv_size: 17 + 2 + name.count + 1 + 4 + value.count, mv_data: nil)
            try checkLMDB(
                mdb_put(transaction, log, &keyValue, &data, UInt32(MDB_APPEND | MDB_RESERVE)), "mdb_put(log)")
            guard let base = data.mv_data else { throw LMDBFailure(code: EINVAL, operation: "mdb_put(log)") }
            var offset = 0
            func append<T: FixedWidthInteger>(_ integer: T) {
                withUnsafeBytes(of: integer.bigEndian) {
                    (base + offset).copyMemory(from: $0.baseAddress!, byteCount: $0.count)
                }
                offset += MemoryLayout<T>.size
            }
            func append(_ bytes: UnsafeRawBufferPointer) {
                (base + offset).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
                offset += bytes.count
            }
            append(UInt8(1))
            append(UInt64(sequence))
            append(UInt32(1))
            append(UInt32(1))
            append(UInt16(name.count))
            append(name)
            append(UInt8(1))
            append(UInt32(value.count))
            append(value)
        }
    }

    private func prune(_ transaction: OpaquePointer) throws {
        var opened: OpaquePointer?
        try checkLMDB(mdb_cursor_open(transaction, log, &opened), "mdb_cursor_open(log)")
        guard let cursor = opened else { throw LMDBFailure(code: EINVAL, operation: "mdb_cursor_open") }
        defer { mdb_cursor_close(cursor) }
        let cutoff = sequence - Self.retention
        var key = MDB_val()
        var data = MDB_val()
        var code = mdb_cursor_get(cursor, &key, &data, MDB_FIRST)
        while code == 0, key.mv_size == 8,
            UInt64(bigEndian: key.mv_data.loadUnaligned(as: UInt64.self)) <= cutoff
        {
            try checkLMDB(mdb_cursor_del(cursor, 0), "mdb_cursor_del(log)")
            code = mdb_cursor_get(cursor, &key, &data, MDB_GET_CURRENT)
        }
    }
}
