import Foundation
import PersistentDefaults

/// `set/<int|struct>/{durable,bounded}-interleaved/…`: raw LMDB put + commit (durable, or with
/// `MDB_NOSYNC`) and `store.set` (`.sync`, or `.bounded`), alternating sample by sample, for the
/// set ratios. Durable commits vary by tens of percent over seconds on a shared virtual disk, and
/// the same non-durable set measured at different moments of one run moved by ±30 % here;
/// alternating cancels that drift.
let interleavedCases: [BenchmarkCase] = [
    BenchmarkCase(name: "set/int/durable-interleaved") { try setInterleaved(Int.self, durable: true, $0) },
    BenchmarkCase(name: "set/struct/durable-interleaved") { try setInterleaved(WindowFrame.self, durable: true, $0) },
    BenchmarkCase(name: "set/int/bounded-interleaved") { try setInterleaved(Int.self, durable: false, $0) },
]

private func setInterleaved<V: BenchmarkValue>(_: V.Type, durable: Bool, _ context: RunContext) throws
    -> [Measurement]
{
    try context.withTemporaryDirectory("raw-interleaved") { rawPath in
        try context.withTemporaryDirectory("store-interleaved") { storePath in
            let lmdb = try RawLMDB(path: rawPath, noSync: !durable)
            var options = PersistentDefaults.Options()
            if !durable { options.durability = .bounded(interval: .milliseconds(100)) }
            let store = try PersistentDefaults(path: storePath, options: options)
            let rawKey = Array("key".utf8)
            let key = PersistentDefaults.Key<V>("key", default: V.sample(-1))
            let encoder = JSONEncoder()
            let samples = try measureInterleaved(
                durable ? .slow(quick: context.quick) : .medium(quick: context.quick),
                { index in try lmdb.set(key: rawKey, value: try V.sample(index).rawBytes(encoder)) },
                { index in try store.set(V.sample(index), for: key) })
            let prefix = "set/\(V.label)/\(durable ? "durable" : "bounded")-interleaved/"
            return [
                Measurement(prefix + (durable ? "raw-lmdb" : "raw-lmdb-nosync"), samples: samples.first),
                Measurement(prefix + (durable ? "store-sync" : "store-bounded"), samples: samples.second),
            ]
        }
    }
}
