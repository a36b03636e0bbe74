import Foundation
import PersistentDefaults

/// `set/<int|struct>/<peer>`: writing one key with a new value each time, per operation.
let setCases: [BenchmarkCase] = makeSetCases(Int.self) + makeSetCases(WindowFrame.self)

private func makeSetCases<V: BenchmarkValue>(_: V.Type) -> [BenchmarkCase] {
    let prefix = "set/\(V.label)/"
    func entry(_ peer: String, _ run: @escaping @Sendable (String, RunContext) throws -> Measurement) -> BenchmarkCase {
        BenchmarkCase(name: prefix + peer) { [try run(prefix + peer, $0)] }
    }
    return [
        entry("raw-lmdb-durable") { try rawLMDBSet(V.self, name: $0, noSync: false, $1) },
        entry("raw-lmdb-nosync") { try rawLMDBSet(V.self, name: $0, noSync: true, $1) },
        entry("store-sync") { try storeSet(V.self, name: $0, durability: .sync, $1) },
        entry("store-bounded") {
            try storeSet(V.self, name: $0, durability: .bounded(interval: .milliseconds(100)), $1)
        },
        entry("userdefaults-set") { try userDefaultsSet(V.self, name: $0, synchronize: false, $1) },
        entry("userdefaults-set-synchronize") { try userDefaultsSet(V.self, name: $0, synchronize: true, $1) },
        entry("sqlite-wal-full") { try sqliteSet(V.self, name: $0, synchronous: "FULL", $1) },
        entry("sqlite-wal-normal") { try sqliteSet(V.self, name: $0, synchronous: "NORMAL", $1) },
    ]
}

private func rawLMDBSet<V: BenchmarkValue>(_: V.Type, name: String, noSync: Bool, _ context: RunContext) throws
    -> Measurement
{
    try context.withTemporaryDirectory("raw-set") { path in
        let lmdb = try RawLMDB(path: path, noSync: noSync)
        let key = Array("key".utf8)
        let encoder = JSONEncoder()
        let samples = try measure(noSync ? .medium(quick: context.quick) : .slow(quick: context.quick)) { index in
            try lmdb.set(key: key, value: try V.sample(index).rawBytes(encoder))
        }
        return Measurement(name, samples: samples, note: noSync ? "MDB_NOSYNC: no fsync, reference only" : nil)
    }
}

private func storeSet<V: BenchmarkValue>(
    _: V.Type, name: String, durability: PersistentDefaults.Durability, _ context: RunContext
) throws -> Measurement {
    try context.withTemporaryDirectory("store-set") { path in
        var options = PersistentDefaults.Options()
        options.durability = durability
        let store = try PersistentDefaults(path: path, options: options)
        let key = PersistentDefaults.Key<V>("key", default: V.sample(-1))
        let plan: Plan = durability == .sync ? .slow(quick: context.quick) : .medium(quick: context.quick)
        let samples = try measure(plan) { index in try store.set(V.sample(index), for: key) }
        return Measurement(name, samples: samples)
    }
}

private func userDefaultsSet<V: BenchmarkValue>(_: V.Type, name: String, synchronize: Bool, _ context: RunContext)
    throws -> Measurement
{
    try withUserDefaultsSuite { defaults, _ in
        let encoder = JSONEncoder()
        let plan: Plan = synchronize ? .slow(quick: context.quick) : .medium(quick: context.quick)
        let samples = try measure(plan) { index in
            try V.sample(index).store(in: defaults, key: "key", encoder)
            if synchronize { defaults.synchronize() }
        }
        return Measurement(
            name, samples: samples, note: synchronize ? nil : "Linux: in memory only until synchronize()")
    }
}

private func sqliteSet<V: BenchmarkValue>(_: V.Type, name: String, synchronous: String, _ context: RunContext) throws
    -> Measurement
{
    try context.withTemporaryDirectory("sqlite-set") { path in
        let sqlite = try SQLiteKV(path: path + "/kv.sqlite", synchronous: synchronous)
        let encoder = JSONEncoder()
        let plan: Plan = synchronous == "FULL" ? .slow(quick: context.quick) : .medium(quick: context.quick)
        let samples = try measure(plan) { index in
            try sqlite.set(key: "key", value: try V.sample(index).rawBytes(encoder))
        }
        return Measurement(
            name, samples: samples, note: synchronous == "FULL" ? nil : "WAL + synchronous=NORMAL: no fsync per commit")
    }
}
