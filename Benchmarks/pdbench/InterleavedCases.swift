import Foundation
import PersistentDefaults

/// `set/<int|struct>/{durable,bounded}-interleaved/…`: raw LMDB put + commit (durable, or with
/// `MDB_NOSYNC`) and `store.set` (`.sync`, or `.bounded`), alternating sample by sample, for the
/// set ratios. Durable commits vary by tens of percent over seconds on a shared virtual disk, and
/// the same non-durable set measured at different moments of one run moved by ±30 % here;
/// alternating cancels that drift. For Int a third side alternates with them, `raw-lmdb-logged`:
/// LMDB doing exactly its part of the store's set (``LoggedSetFloor``), the floor of the store's
/// figure.
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
            let floorPath = storePath + "-logged-floor"
            try FileManager.default.createDirectory(atPath: floorPath, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: floorPath) }
            // The floor of an Int set: LMDB doing exactly its part of the store's set.
            let floor = V.self == Int.self ? try LoggedSetFloor(path: floorPath, noSync: !durable) : nil
            var bodies: [(Int) throws -> Void] = [
                { index in try lmdb.set(key: rawKey, value: try V.sample(index).rawBytes(encoder)) },
                { index in try store.set(V.sample(index), for: key) },
            ]
            if let floor { bodies.append { index in try floor.set(name: rawKey, value: index) } }
            let samples = try measureAlternating(
                durable ? .slow(quick: context.quick) : .medium(quick: context.quick), bodies)
            let prefix = "set/\(V.label)/\(durable ? "durable" : "bounded")-interleaved/"
            var measurements = [
                Measurement(prefix + (durable ? "raw-lmdb" : "raw-lmdb-nosync"), samples: samples[0]),
                Measurement(prefix + (durable ? "store-sync" : "store-bounded"), samples: samples[1]),
            ]
            if floor != nil {
                measurements.append(
                    Measurement(
                        prefix + "raw-lmdb-logged", samples: samples[2],
                        note: "LMDB's own part of the store's set: value and log record in named databases, pruning"))
            }
            return measurements
        }
    }
}
