import CLMDB
import Foundation
import PersistentDefaults

/// `transaction/<n>-keys/<peer>`: one durable transaction writing n Int keys, per transaction.
/// `transaction/<n>-keys-nosync/<peer>`: the same without `fsync` (raw `MDB_NOSYNC`, store
/// `.bounded`), so that the CPU work per key shows instead of the disk's sync time. Raw LMDB and
/// the store alternate transaction by transaction, so that the disk's and the machine's drift
/// hits both alike; with 1,000 keys a third side alternates with them, `raw-lmdb-logged`: LMDB
/// doing exactly its part of the store's transaction, its log record's size included (the floor
/// of the store's figure; `Benchmarks/floors/logged-transaction.c` mode 2 measures an earlier,
/// 5-bytes-a-change smaller version of it in C).
let transactionCases: [BenchmarkCase] = [
    BenchmarkCase(name: "transaction/10-keys") { try transactions(count: 10, $0) },
    BenchmarkCase(name: "transaction/1000-keys") { try transactions(count: 1_000, $0) },
    BenchmarkCase(name: "transaction/1000-keys-nosync") { try transactions(count: 1_000, noSync: true, $0) },
]

private func transactionPlan(count: Int, quick: Bool) -> Plan {
    if quick { return Plan(warmup: 5, samples: count > 100 ? 20 : 50, batch: 1) }
    return Plan(warmup: 50, samples: count > 100 ? 300 : 1_000, batch: 1)
}

private func transactions(count: Int, noSync: Bool = false, _ context: RunContext) throws -> [Measurement] {
    try context.withTemporaryDirectory("raw-txn") { rawPath in
        try context.withTemporaryDirectory("store-txn") { storePath in
            let lmdb = try RawLMDB(path: rawPath, noSync: noSync)
            let rawKeys = (0..<count).map { Array("key-\($0)".utf8) }
            var options = PersistentDefaults.Options()
            if noSync { options.durability = .bounded(interval: .seconds(1)) }
            let store = try PersistentDefaults(path: storePath, options: options)
            let keys = (0..<count).map { PersistentDefaults.Key<Int>("key-\($0)", default: -1) }
            var bodies: [(Int) throws -> Void] = [
                { round in
                    try lmdb.write { transaction in
                        for (index, key) in rawKeys.enumerated() {
                            let value = round &* count &+ index
                            try key.withUnsafeBytes { key in
                                try withUnsafeBytes(of: value) { try lmdb.put(transaction, key: key, value: $0) }
                            }
                        }
                    }
                },
                { round in
                    try store.write { transaction in
                        for (index, key) in keys.enumerated() { transaction[key] = round &* count &+ index }
                    }
                },
            ]
            let prefix = "transaction/\(count)-keys\(noSync ? "-nosync" : "")/"
            var names = [prefix + "raw-lmdb", prefix + (noSync ? "store-bounded" : "store-write")]
            let floorPath = storePath + "-logged-floor"
            let floor = count >= 1_000 ? try LoggedFloor(path: floorPath, noSync: noSync, names: rawKeys) : nil
            defer { try? FileManager.default.removeItem(atPath: floorPath) }
            if let floor {
                bodies.append { round in try floor.transaction(round: round) }
                names.append(prefix + "raw-lmdb-logged")
            }
            let samples = try measureAlternating(transactionPlan(count: count, quick: context.quick), bodies)
            return zip(names, samples).map { Measurement($0, samples: $1) }
        }
    }
}

/// LMDB doing exactly its part of a store's logged transaction of Int keys, through the C API:
/// per key one cursor finds the old value (`MDB_SET_KEY`) and the 9-byte tagged value replaces it
/// where the cursor stands (`MDB_CURRENT`), in a named database; then one log record in the
/// store's format, byte for byte in size — 17 bytes of header (format, time, process, change
/// count) and per change a 2-byte name length, the name, a set mark, a 4-byte value length and
/// the value — is reserved under the next big-endian sequence (`MDB_APPEND | MDB_RESERVE`) in a
/// second named database and written in place, and the log is pruned as the store prunes it by
/// bytes: when its pages (`mdb_stat`) pass the default `logRetentionBytes` (4 MiB) by a
/// sixteenth, the oldest records go until they take at most 4 MiB. The store's figure over this
/// one is what its Swift side costs. The Swift around the C calls is kept to pointer stores: until
/// 2026-12-01 (session 14) the record was built in an array (`append(contentsOf:)`, ~500
/// instructions a key, callgrind) and copied, which counted Swift work as LMDB's; and until
/// session 13 it wrote 5 bytes a change fewer than the store and deleted one record 200 back on
/// every transaction.
private final class LoggedFloor {
    private let lmdb: RawLMDB
    private let names: [[UInt8]]
    private let values: MDB_dbi
    private let log: MDB_dbi
    private var sequence: UInt64 = 0
    private let recordSize: Int
    private static let retentionBytes = 4 << 20

    init(path: String, noSync: Bool, names: [[UInt8]]) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        lmdb = try RawLMDB(path: path, noSync: noSync, namedDatabases: ["values", "log"])
        self.names = names
        values = lmdb.named["values"] ?? 0
        log = lmdb.named["log"] ?? 0
        recordSize = loggedIntRecordSize(names)
    }

    func transaction(round: Int) throws {
        try lmdb.write { transaction in
            var opened: OpaquePointer?
            try checkLMDB(mdb_cursor_open(transaction, values, &opened), "mdb_cursor_open")
            guard let cursor = opened else { throw LMDBFailure(code: EINVAL, operation: "mdb_cursor_open") }
            defer { mdb_cursor_close(cursor) }
            sequence += 1
            var value: (UInt64, UInt64) = (0, 0)
            try withUnsafeMutableBytes(of: &value) { tagged in
                var data = MDB_val(mv_size: 9, mv_data: tagged.baseAddress)
                for index in names.indices {
                    storeTaggedInt(round &* names.count &+ index, at: tagged.baseAddress!)
                    try names[index].withUnsafeBytes { name in
                        var key = MDB_val(
                            mv_size: name.count, mv_data: UnsafeMutableRawPointer(mutating: name.baseAddress))
                        var old = MDB_val()
                        let found = mdb_cursor_get(cursor, &key, &old, MDB_SET_KEY) == 0
                        try checkLMDB(
                            mdb_cursor_put(cursor, &key, &data, found ? UInt32(MDB_CURRENT) : 0), "mdb_cursor_put")
                    }
                }
            }
            try putLoggedIntRecord(
                transaction, log: log, sequence: sequence, size: recordSize, names: names,
                value: { round &* names.count &+ $0 })
            try prune(transaction)
        }
    }

    /// The log's pages in bytes, as the store measures them (`mdb_stat`).
    private func logBytes(_ transaction: OpaquePointer) throws -> Int {
        var stat = MDB_stat()
        try checkLMDB(mdb_stat(transaction, log, &stat), "mdb_stat(log)")
        return Int(stat.ms_psize) * (stat.ms_branch_pages + stat.ms_leaf_pages + stat.ms_overflow_pages)
    }

    private func prune(_ transaction: OpaquePointer) throws {
        guard try logBytes(transaction) - Self.retentionBytes > Self.retentionBytes / 16 else { return }
        var opened: OpaquePointer?
        try checkLMDB(mdb_cursor_open(transaction, log, &opened), "mdb_cursor_open(log)")
        guard let cursor = opened else { throw LMDBFailure(code: EINVAL, operation: "mdb_cursor_open") }
        defer { mdb_cursor_close(cursor) }
        var key = MDB_val()
        var data = MDB_val()
        var code = mdb_cursor_get(cursor, &key, &data, MDB_FIRST)
        while code == 0, key.mv_size == 8,
            UInt64(bigEndian: key.mv_data.loadUnaligned(as: UInt64.self)) < sequence,
            try logBytes(transaction) > Self.retentionBytes
        {
            try checkLMDB(mdb_cursor_del(cursor, 0), "mdb_cursor_del(log)")
            code = mdb_cursor_get(cursor, &key, &data, MDB_GET_CURRENT)
        }
    }
}
