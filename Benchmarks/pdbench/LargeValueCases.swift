import Foundation
import PersistentDefaults

/// `set/data-1mib/{raw-lmdb-nosync,store-bounded}`: one key set to a new 1 MiB `Data` value each
/// time, raw LMDB (`MDB_NOSYNC` put and commit) and the store (`.bounded`) alternating set by set:
/// what copying a large value costs the store (into its transaction's buffer, into the log's
/// record) next to LMDB's own copy into its pages.
let largeValueCases: [BenchmarkCase] = [
    BenchmarkCase(name: "set/data-1mib") { try largeSets($0) }
]

private func largeSets(_ context: RunContext) throws -> [Measurement] {
    try context.withTemporaryDirectory("large-raw") { rawPath in
        try context.withTemporaryDirectory("large-store") { storePath in
            let lmdb = try RawLMDB(path: rawPath, noSync: true)
            var options = PersistentDefaults.Options()
            options.durability = .bounded(interval: .seconds(1))
            let store = try PersistentDefaults(path: storePath, options: options)
            let key = PersistentDefaults.Key<Data>("blob", default: Data())
            let rawKey = Array("blob".utf8)
            let size = 1 << 20
            // The store's bytes: the data tag, then the data (what raw LMDB stores too).
            func value(_ round: Int) -> Data { Data(repeating: UInt8(truncatingIfNeeded: round), count: size) }
            let plan = context.quick ? Plan(warmup: 2, samples: 8, batch: 1) : Plan(warmup: 5, samples: 80, batch: 1)
            let samples = try measureAlternating(
                plan,
                [
                    { round in try lmdb.set(key: rawKey, value: [StoredValue.Tag.data.rawValue] + value(round)) },
                    { round in try store.set(value(round), for: key) },
                ])
            return [
                Measurement("set/data-1mib/raw-lmdb-nosync", samples: samples[0]),
                Measurement("set/data-1mib/store-bounded", samples: samples[1]),
            ]
        }
    }
}
