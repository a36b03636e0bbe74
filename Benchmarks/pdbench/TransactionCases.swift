import Foundation
import PersistentDefaults

/// `transaction/<n>-keys/<peer>`: one durable transaction writing n Int keys, per transaction.
/// `transaction/<n>-keys-nosync/<peer>`: the same without `fsync` (raw `MDB_NOSYNC`, store
/// `.bounded`), so that the CPU work per key shows instead of the disk's sync time.
let transactionCases: [BenchmarkCase] =
    [10, 1_000].flatMap { count in
        [
            BenchmarkCase(name: "transaction/\(count)-keys/raw-lmdb") { [try rawTransaction(count: count, $0)] },
            BenchmarkCase(name: "transaction/\(count)-keys/store-write") { [try storeTransaction(count: count, $0)] },
        ]
    }
    + [
        BenchmarkCase(name: "transaction/1000-keys-nosync/raw-lmdb") {
            [try rawTransaction(count: 1_000, noSync: true, $0)]
        },
        BenchmarkCase(name: "transaction/1000-keys-nosync/store-bounded") {
            [try storeTransaction(count: 1_000, noSync: true, $0)]
        },
    ]

private func transactionPlan(count: Int, quick: Bool) -> Plan {
    if quick { return Plan(warmup: 5, samples: count > 100 ? 20 : 50, batch: 1) }
    return Plan(warmup: 50, samples: count > 100 ? 300 : 1_000, batch: 1)
}

private func rawTransaction(count: Int, noSync: Bool = false, _ context: RunContext) throws -> Measurement {
    try context.withTemporaryDirectory("raw-txn") { path in
        let lmdb = try RawLMDB(path: path, noSync: noSync)
        let keys = (0..<count).map { Array("key-\($0)".utf8) }
        let samples = try measure(transactionPlan(count: count, quick: context.quick)) { round in
            try lmdb.write { transaction in
                for (index, key) in keys.enumerated() {
                    let value = round &* count &+ index
                    try key.withUnsafeBytes { key in
                        try withUnsafeBytes(of: value) { try lmdb.put(transaction, key: key, value: $0) }
                    }
                }
            }
        }
        return Measurement("transaction/\(count)-keys\(noSync ? "-nosync" : "")/raw-lmdb", samples: samples)
    }
}

private func storeTransaction(count: Int, noSync: Bool = false, _ context: RunContext) throws -> Measurement {
    try context.withTemporaryDirectory("store-txn") { path in
        var options = PersistentDefaults.Options()
        if noSync { options.durability = .bounded(interval: .seconds(1)) }
        let store = try PersistentDefaults(path: path, options: options)
        let keys = (0..<count).map { PersistentDefaults.Key<Int>("key-\($0)", default: -1) }
        let samples = try measure(transactionPlan(count: count, quick: context.quick)) { round in
            try store.write { transaction in
                for (index, key) in keys.enumerated() { transaction[key] = round &* count &+ index }
            }
        }
        return Measurement(
            noSync ? "transaction/\(count)-keys-nosync/store-bounded" : "transaction/\(count)-keys/store-write",
            samples: samples)
    }
}
