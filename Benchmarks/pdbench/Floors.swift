import CLMDB
import Foundation

/// Writes an Int as the store keeps it at `target`: the `int` tag (3), then the value big-endian
/// (9 bytes).
@inline(__always)
func storeTaggedInt(_ value: Int, at target: UnsafeMutableRawPointer) {
    target.storeBytes(of: 3, as: UInt8.self)
    (target + 1).storeBytes(of: Int64(value).bigEndian, as: Int64.self)
}

/// An Int as the store keeps it (``storeTaggedInt(_:at:)``), in an array.
func taggedInt(_ value: Int) -> [UInt8] {
    [UInt8](unsafeUninitializedCapacity: 9) { bytes, count in
        storeTaggedInt(value, at: UnsafeMutableRawPointer(bytes.baseAddress!))
        count = 9
    }
}

/// The size of a log record in the store's format whose changes set Int keys with these names:
/// 17 bytes of header, then per change a 2-byte name length, the name, a set mark, a 4-byte
/// value length and the 9-byte tagged value.
func loggedIntRecordSize<Names: Collection<[UInt8]>>(_ names: Names) -> Int {
    17 + names.reduce(0) { $0 + 2 + $1.count + 1 + 4 + 9 }
}

/// Puts a log record in the store's format, as the store does: reserved in the database `log`
/// under `sequence` big-endian (`MDB_APPEND | MDB_RESERVE`) and written in place with pointer
/// stores. Its header holds format 1, `sequence` where the store writes its timestamp, process 1
/// and the change count; change `i` sets `names[i]` to the tagged Int `value(i)`. `size` is
/// ``loggedIntRecordSize(_:)`` of `names`.
@inline(__always)
func putLoggedIntRecord<Names: Collection<[UInt8]>>(
    _ transaction: OpaquePointer, log: MDB_dbi, sequence: UInt64, size: Int, names: Names, value: (Int) -> Int
) throws {
    try withUnsafeBytes(of: sequence.bigEndian) { key in
        var keyValue = MDB_val(mv_size: 8, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var data = MDB_val(mv_size: size, mv_data: nil)
        try checkLMDB(mdb_put(transaction, log, &keyValue, &data, UInt32(MDB_APPEND | MDB_RESERVE)), "mdb_put(log)")
        guard var target = data.mv_data else { throw LMDBFailure(code: EINVAL, operation: "mdb_put(log)") }
        target.storeBytes(of: 1, as: UInt8.self)  // format
        (target + 1).storeBytes(of: sequence.bigEndian, as: UInt64.self)  // the store's timestamp
        (target + 9).storeBytes(of: UInt32(1).bigEndian, as: UInt32.self)  // process ID
        (target + 13).storeBytes(of: UInt32(names.count).bigEndian, as: UInt32.self)
        target += 17
        for (index, name) in names.enumerated() {
            name.withUnsafeBytes { name in
                target.storeBytes(of: UInt16(name.count).bigEndian, as: UInt16.self)
                (target + 2).copyMemory(from: name.baseAddress!, byteCount: name.count)
                target += 2 + name.count
            }
            target.storeBytes(of: 1, as: UInt8.self)  // set mark
            (target + 1).storeBytes(of: UInt32(9).bigEndian, as: UInt32.self)
            storeTaggedInt(value(index), at: target + 5)
            target += 14
        }
    }
}

/// LMDB doing exactly its part of a store's single-key set of an Int, through the C API, so that
/// the store's figure over it is what its Swift side costs and its figure over raw LMDB's is the
/// floor of a logged commit (`set/int/*-interleaved/raw-lmdb-logged`):
/// - a cursor finds the old value (`MDB_SET_KEY`) in the named database `values` and the 9-byte
///   tagged value replaces it where the cursor stands (`MDB_CURRENT`; a plain put the first time);
/// - one log record — 17 bytes of header (format, time, process, change count) and the change
///   (2-byte name length, name, set mark, 4-byte value length, value) — is reserved and written
///   in the named database `log` under the next big-endian sequence (`putLoggedIntRecord`);
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
                }
            }
            sequence += 1
            try putLoggedIntRecord(
                transaction, log: log, sequence: sequence, size: loggedIntRecordSize(CollectionOfOne(name)),
                names: CollectionOfOne(name), value: { _ in value })
            if sequence > Self.retention, sequence % Self.slack == 0 { try prune(transaction) }
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
