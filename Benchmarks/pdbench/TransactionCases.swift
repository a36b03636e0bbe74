import Foundation
import PersistentDefaults

/// `transaction/<n>-keys/<peer>`: one durable transaction writing n Int keys, per transaction.
/// `transaction/<n>-keys-nosync/<peer>`: the same without `fsync` (raw `MDB_NOSYNC`, store
/// `.bounded`), so that the CPU work per key shows instead of the disk's sync time. Raw LMDB and
/// the store alternate transaction by transaction, so that the disk's and the machine's drift
/// hits both alike.
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
            let samples = try measureInterleaved(
                transactionPlan(count: count, quick: context.quick),
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
                })
            let prefix = "transaction/\(count)-keys\(noSync ? "-nosync" : "")/"
            return [
                Measurement(prefix + "raw-lmdb", samples: samples.first),
                Measurement(prefix + (noSync ? "store-bounded" : "store-write"), samples: samples.second),
            ]
        }
    }
}
