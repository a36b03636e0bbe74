import Foundation
import PersistentDefaults

/// `set/<int|struct>/durable-interleaved/…`: raw LMDB put + durable commit and durable
/// `store.set`, alternating sample by sample, for the durable-set ratio. Durable commits vary by
/// tens of percent over seconds on a shared virtual disk; alternating cancels that drift.
let interleavedCases: [BenchmarkCase] = [
    BenchmarkCase(name: "set/int/durable-interleaved") { try durableInterleaved(Int.self, $0) },
    BenchmarkCase(name: "set/struct/durable-interleaved") { try durableInterleaved(WindowFrame.self, $0) },
]

private func durableInterleaved<V: BenchmarkValue>(_: V.Type, _ context: RunContext) throws -> [Measurement] {
    try context.withTemporaryDirectory("raw-interleaved") { rawPath in
        try context.withTemporaryDirectory("store-interleaved") { storePath in
            let lmdb = try RawLMDB(path: rawPath)
            let store = try PersistentDefaults(path: storePath)
            let rawKey = Array("key".utf8)
            let key = PersistentDefaults.Key<V>("key", default: V.sample(-1))
            let encoder = JSONEncoder()
            let samples = try measureInterleaved(
                .slow(quick: context.quick),
                { index in try lmdb.set(key: rawKey, value: try V.sample(index).rawBytes(encoder)) },
                { index in try store.set(V.sample(index), for: key) })
            let prefix = "set/\(V.label)/durable-interleaved/"
            return [
                Measurement(prefix + "raw-lmdb", samples: samples.first),
                Measurement(prefix + "store-sync", samples: samples.second),
            ]
        }
    }
}
