import Foundation
import PersistentDefaults

/// `get/<int|struct>/<peer>`: reading one stored key, per operation.
let getCases: [BenchmarkCase] = makeGetCases(Int.self) + makeGetCases(WindowFrame.self)

private func makeGetCases<V: BenchmarkValue>(_: V.Type) -> [BenchmarkCase] {
    let prefix = "get/\(V.label)/"
    return [
        BenchmarkCase(name: prefix + "raw-lmdb") { [try rawLMDBGet(V.self, name: prefix + "raw-lmdb", $0)] },
        BenchmarkCase(name: prefix + "store-value-for") {
            [try storeGet(V.self, name: prefix + "store-value-for", $0)]
        },
        BenchmarkCase(name: prefix + "store-subscript") {
            [try storeGet(V.self, name: prefix + "store-subscript", $0)]
        },
        BenchmarkCase(name: prefix + "userdefaults") {
            [try userDefaultsGet(V.self, name: prefix + "userdefaults", $0)]
        },
        BenchmarkCase(name: prefix + "sqlite-wal") { [try sqliteGet(V.self, name: prefix + "sqlite-wal", $0)] },
    ]
}

private func plan<V: BenchmarkValue>(for _: V.Type, quick: Bool) -> Plan {
    V.self == Int.self ? .fast(quick: quick) : .medium(quick: quick)
}

private func rawLMDBGet<V: BenchmarkValue>(_: V.Type, name: String, _ context: RunContext) throws -> Measurement {
    try context.withTemporaryDirectory("raw-get") { path in
        let lmdb = try RawLMDB(path: path)
        let key = Array("key".utf8)
        try lmdb.set(key: key, value: try V.sample(42).rawBytes(JSONEncoder()))
        let decoder = JSONDecoder()
        var sum = 0
        let samples = try key.withUnsafeBytes { key in
            try measure(plan(for: V.self, quick: context.quick)) { _ in
                sum &+= try lmdb.get(key: key) { bytes in
                    guard let bytes else { return 0 }
                    return try V.decode(raw: bytes, decoder).checksum
                }
            }
        }
        blackHole(sum)
        return Measurement(name, samples: samples)
    }
}

private func storeGet<V: BenchmarkValue>(_: V.Type, name: String, _ context: RunContext) throws -> Measurement {
    try context.withTemporaryDirectory("store-get") { path in
        let store = try PersistentDefaults(path: path)
        let key = PersistentDefaults.Key<V>("key", default: V.sample(0))
        try store.set(V.sample(42), for: key)
        var sum = 0
        let samples: [Double]
        if name.hasSuffix("subscript") {
            samples = measure(plan(for: V.self, quick: context.quick)) { _ in sum &+= store[key].checksum }
        } else {
            samples = try measure(plan(for: V.self, quick: context.quick)) { _ in
                sum &+= try store.value(for: key).checksum
            }
        }
        blackHole(sum)
        return Measurement(name, samples: samples)
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
