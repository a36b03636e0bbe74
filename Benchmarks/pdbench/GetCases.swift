import Foundation
import PersistentDefaults

/// `get/<int|struct>/<peer>`: reading one stored key, per operation. Raw LMDB,
/// `store.value(for:)` and `store[key]` are one case, `get/<kind>/raw-and-store`, that alternates
/// them sample by sample (measured apart, the struct ratio read 0.69–1.16× from run to run).
let getCases: [BenchmarkCase] = makeGetCases(Int.self) + makeGetCases(WindowFrame.self)

private func makeGetCases<V: BenchmarkValue>(_: V.Type) -> [BenchmarkCase] {
    let prefix = "get/\(V.label)/"
    return [
        BenchmarkCase(name: prefix + "raw-and-store") { try rawAndStoreGets(V.self, prefix: prefix, $0) },
        BenchmarkCase(name: prefix + "userdefaults") {
            [try userDefaultsGet(V.self, name: prefix + "userdefaults", $0)]
        },
        BenchmarkCase(name: prefix + "sqlite-wal") { [try sqliteGet(V.self, name: prefix + "sqlite-wal", $0)] },
    ]
}

private func plan<V: BenchmarkValue>(for _: V.Type, quick: Bool) -> Plan {
    V.self == Int.self ? .fast(quick: quick) : .medium(quick: quick)
}

/// Raw LMDB (the C API, the same JSON or 8-byte payload), `store.value(for:)` and `store[key]`,
/// alternated.
private func rawAndStoreGets<V: BenchmarkValue>(_: V.Type, prefix: String, _ context: RunContext) throws
    -> [Measurement]
{
    try context.withTemporaryDirectory("raw-get") { rawPath in
        try context.withTemporaryDirectory("store-get") { storePath in
            let lmdb = try RawLMDB(path: rawPath)
            let rawKey = Array("key".utf8)
            try lmdb.set(key: rawKey, value: try V.sample(42).rawBytes(JSONEncoder()))
            let decoder = JSONDecoder()
            let store = try PersistentDefaults(path: storePath)
            let key = PersistentDefaults.Key<V>("key", default: V.sample(0))
            try store.set(V.sample(42), for: key)
            var sum = 0
            let samples = try rawKey.withUnsafeBytes { rawKey in
                try measureAlternating(
                    plan(for: V.self, quick: context.quick),
                    [
                        { _ in
                            sum &+= try lmdb.get(key: rawKey) { bytes in
                                guard let bytes else { return 0 }
                                return try V.decode(raw: bytes, decoder).checksum
                            }
                        },
                        { _ in sum &+= try store.value(for: key).checksum },
                        { _ in sum &+= store[key].checksum },
                    ])
            }
            blackHole(sum)
            return [
                Measurement(prefix + "raw-lmdb", samples: samples[0]),
                Measurement(prefix + "store-value-for", samples: samples[1]),
                Measurement(prefix + "store-subscript", samples: samples[2]),
            ]
        }
    }
}

private func userDefaultsGet<V: BenchmarkValue>(_: V.Type, name: String, _ context: RunContext) throws -> Measurement {
    try withUserDefaultsSuite { defaults, _ in
        try V.sample(42).store(in: defaults, key: "key", JSONEncoder())
        defaults.synchronize()
        let decoder = JSONDecoder()
        var sum = 0
        let samples = try measure(plan(for: V.self, quick: context.quick)) { _ in
            sum &+= try V.load(from: defaults, key: "key", decoder).checksum
        }
        blackHole(sum)
        return Measurement(name, samples: samples)
    }
}

private func sqliteGet<V: BenchmarkValue>(_: V.Type, name: String, _ context: RunContext) throws -> Measurement {
    try context.withTemporaryDirectory("sqlite-get") { path in
        let sqlite = try SQLiteKV(path: path + "/kv.sqlite", synchronous: "NORMAL")
        try sqlite.set(key: "key", value: try V.sample(42).rawBytes(JSONEncoder()))
        let decoder = JSONDecoder()
        var sum = 0
        let samples = try measure(plan(for: V.self, quick: context.quick)) { _ in
            sum &+= try sqlite.get(key: "key") { bytes in
                guard let bytes else { return 0 }
                return try V.decode(raw: bytes, decoder).checksum
            }
        }
        blackHole(sum)
        return Measurement(name, samples: samples)
    }
}
