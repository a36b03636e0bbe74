import CLMDB
import Foundation
import Observation
import PersistentDefaults
import Synchronization

/// What services see when they read: many keys in scattered order (not one hot key), many
/// `@PersistentDefault` properties, several reader threads, and the file after a write-heavy
/// run while other threads read now and then.
///
/// - `get/int/1000-keys-scattered/{raw-lmdb,store-subscript,property-wrapper,
///   store-subscript-and-registrar-access,raw-lmdb-named}`: 1,000 Int keys read in a fixed
///   shuffled order; raw is the C API with one kept read transaction renewed and reset per get;
///   the wrapper case reads 1,000 `@PersistentDefault` values, one per key; `raw-lmdb-named` is
///   raw's get on the store's layout (a named database, tagged values): the floor of the store's
///   read, since `mdb_txn_renew` marks every named database stale and the first get after it
///   looks the database up again. One case: the five alternate sample by sample, so that the
///   machine's drift (±30 % over a run here) hits all alike.
/// - `get/int/{1,2,4}-threads/{raw-lmdb,store}`: n threads each reading the 1,000 keys in
///   scattered order for a fixed time; ops/s is the total reads per second (raw: one kept read
///   transaction per thread). One case (`get/int/threads`): the six take turns in short windows,
///   round after round, so that the machine's drift hits n threads and one thread alike; each
///   row's ops/s is the median of its windows.
/// - `file/idle-readers/{0,32}-readers`: `data.mdb` after 20,000 bounded sets of 64-byte values
///   over 100 keys, while n threads read one key each every 20 ms (and are idle in between).
let serviceReadCases: [BenchmarkCase] =
    [
        BenchmarkCase(name: "get/int/1000-keys-scattered") { try scattered($0) }
    ]
    + [BenchmarkCase(name: "get/int/threads") { try threadedReads($0) }]
    + [0, 32].map { readers in
        BenchmarkCase(name: "file/idle-readers/\(readers)-readers") { [try fileAfterWrites(readers: readers, $0)] }
    }

private let keyCount = 1_000

/// The key names and a fixed scattered order of them (a SplitMix64 shuffle, the same every run).
private let scatteredNames: [String] = {
    var names = (0..<keyCount).map { "service.setting.\($0)" }
    var state: UInt64 = 0x9E37_79B9_7F4A_7C15
    func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    for index in stride(from: names.count - 1, to: 0, by: -1) {
        names.swapAt(index, Int(next() % UInt64(index + 1)))
    }
    return names
}()

/// A store holding the 1,000 keys (values = their index), written in one transaction.
private func makeStore(_ path: String) throws -> (PersistentDefaults, [PersistentDefaults.Key<Int>]) {
    let store = try PersistentDefaults(path: path)
    let keys = scatteredNames.map { PersistentDefaults.Key<Int>($0, default: -1) }
    try store.write { transaction in
        for (index, key) in keys.enumerated() { transaction[key] = index }
    }
    return (store, keys)
}

/// Raw LMDB holding the same keys and 8-byte values.
private func makeRaw(_ path: String) throws -> (RawLMDB, [[UInt8]]) {
    let lmdb = try RawLMDB(path: path)
    let keys = scatteredNames.map { Array($0.utf8) }
    try lmdb.write { transaction in
        for (index, key) in keys.enumerated() {
            try key.withUnsafeBytes { key in
                try withUnsafeBytes(of: Int64(index).bigEndian) { try lmdb.put(transaction, key: key, value: $0) }
            }
        }
    }
    return (lmdb, keys)
}

/// Raw LMDB holding the same keys as the store lays them out: in the named database `values`
/// (beside `log` and `meta`), each value tagged as the store tags an Int (9 bytes).
private func makeRawNamed(_ path: String) throws -> (RawLMDB, MDB_dbi) {
    let lmdb = try RawLMDB(path: path, namedDatabases: ["log", "meta", "values"])
    let values = lmdb.named["values"] ?? 0
    try lmdb.write { transaction in
        for (index, name) in scatteredNames.enumerated() {
            let tagged = taggedInt(index)
            try Array(name.utf8).withUnsafeBytes { key in
                try tagged.withUnsafeBytes { try lmdb.put(transaction, key: key, value: $0, database: values) }
            }
        }
    }
    return (lmdb, values)
}

@inline(__always)
private func decodeTagged(_ bytes: UnsafeRawBufferPointer?) -> Int {
    guard let bytes, bytes.count == 9 else { return 0 }
    return Int(Int64(bigEndian: bytes.loadUnaligned(fromByteOffset: 1, as: Int64.self)))
}

@inline(__always)
private func decodeRaw(_ bytes: UnsafeRawBufferPointer?) -> Int {
    guard let bytes, bytes.count == 8 else { return 0 }
    return Int(Int64(bigEndian: bytes.loadUnaligned(as: Int64.self)))
}

/// The four scattered reads, alternated: raw LMDB, `store[key]`, the wrappers, and `store[key]`
/// with `ObservationRegistrar.access` (the floor of a wrapper that supports Observation).
private func scattered(_ context: RunContext) throws -> [Measurement] {
    try context.withTemporaryDirectory("scattered-raw") { rawPath in
        try context.withTemporaryDirectory("scattered-store") { storePath in
            let (lmdb, rawKeys) = try makeRaw(rawPath)
            let (store, keys) = try makeStore(storePath)
            let namedPath = storePath + "-named"
            try FileManager.default.createDirectory(atPath: namedPath, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: namedPath) }
            let (named, values) = try makeRawNamed(namedPath)
            let wrappers = keys.map { PersistentDefault($0, in: store) }
            let subjects = keys.map { _ in TrackedSubject() }
            var sum = 0
            let samples = try measureAlternating(
                .fast(quick: context.quick),
                [
                    { index in
                        sum &+= try rawKeys[index % keyCount].withUnsafeBytes { try lmdb.get(key: $0, decodeRaw) }
                    },
                    { index in sum &+= store[keys[index % keyCount]] },
                    { index in sum &+= wrappers[index % keyCount].wrappedValue },
                    { index in
                        subjects[index % keyCount].access()
                        sum &+= store[keys[index % keyCount]]
                    },
                    { index in
                        sum &+= try rawKeys[index % keyCount].withUnsafeBytes {
                            try named.get(key: $0, database: values, decodeTagged)
                        }
                    },
                ])
            blackHole(sum)
            let prefix = "get/int/1000-keys-scattered/"
            return [
                Measurement(prefix + "raw-lmdb", samples: samples[0]),
                Measurement(prefix + "store-subscript", samples: samples[1]),
                Measurement(
                    prefix + "property-wrapper", samples: samples[2],
                    note: "1,000 @PersistentDefault properties, one per key; compare with store-subscript"),
                Measurement(
                    prefix + "store-subscript-and-registrar-access", samples: samples[3],
                    note: "store[key] and ObservationRegistrar.access on one of 1,000 Observable objects"),
                Measurement(
                    prefix + "raw-lmdb-named", samples: samples[4],
                    note: "raw mdb_get as the store lays the keys out: a named database, 9-byte tagged values"),
            ]
        }
    }
}

/// An `Observable` object of one property, as a property wrapper that supports Observation
/// tracking needs one per key: a read must tell its registrar (`access`), which checks whether
/// the thread is inside `withObservationTracking`.
private final class TrackedSubject: Observable, Sendable {
    private let registrar = ObservationRegistrar()
    var count: Int { 0 }
    private static let path: KeyPath<TrackedSubject, Int> & Sendable = \.count

    func access() { registrar.access(self, keyPath: Self.path) }
}

/// Runs `read` (passed a running index) on `threads` threads for `duration` nanoseconds;
/// returns per-batch nanoseconds per read of every thread and the total reads per second.
private func runThreads(
    _ threads: Int, duration: UInt64, _ makeReader: @escaping @Sendable () throws -> (Int) throws -> Int
) throws -> (samples: [Double], perSecond: Double) {
    let batch = 100
    let samples = Mutex<[Double]>([])
    let reads = Atomic<Int>(0)
    let failure = Mutex<String?>(nil)
    let done = DispatchGroup()
    let ready = DispatchGroup()
    let go = DispatchSemaphore(value: 0)
    for _ in 0..<threads {
        done.enter()
        ready.enter()
        let thread = Thread {
            defer { done.leave() }
            do {
                let read = try makeReader()
                var sum = 0
                for index in 0..<10_000 { sum &+= try read(index) }  // Warm-up.
                ready.leave()
                go.wait()
                let deadline = monotonicNanoseconds() + duration
                var own: [Double] = []
                var index = 0
                var now = monotonicNanoseconds()
                while now < deadline {
                    for _ in 0..<batch {
                        sum &+= try read(index)
                        index += 1
                    }
                    let after = monotonicNanoseconds()
                    own.append(Double(after - now) / Double(batch))
                    now = after
                }
                blackHole(sum)
                reads.add(index, ordering: .relaxed)
                samples.withLock { $0 += own }
            } catch {
                failure.withLock { $0 = "\(error)" }
                ready.leave()
            }
        }
        thread.start()
    }
    ready.wait()
    let start = monotonicNanoseconds()
    for _ in 0..<threads { go.signal() }
    done.wait()
    let elapsed = Double(monotonicNanoseconds() - start)
    if let message = failure.withLock({ $0 }) { throw BenchmarkError.setup(message) }
    return (samples.withLock { $0 }, Double(reads.load(ordering: .relaxed)) / elapsed * 1e9)
}

/// The thread counts of `get/int/threads`, and how its windows take turns.
private let threadCounts = [1, 2, 4]

/// `get/int/{1,2,4}-threads/{raw-lmdb,store}`, measured in turns: each round runs every
/// configuration for one short window, in alternating order (forwards, then backwards), so that
/// a configuration is never measured only while the machine is slow. Rows: every window's
/// per-batch samples, and the median of the windows' reads per second.
private func threadedReads(_ context: RunContext) throws -> [Measurement] {
    try context.withTemporaryDirectory("threads-store") { storePath in
        try context.withTemporaryDirectory("threads-raw") { rawPath in
            let (store, keys) = try makeStore(storePath)
            let (lmdb, rawKeys) = try makeRaw(rawPath)
            // RawLMDB is used only to create per-thread transactions, which LMDB allows from any thread.
            nonisolated(unsafe) let shared = lmdb
            let storeReader: @Sendable () throws -> (Int) throws -> Int = {
                { index in store[keys[index % keyCount]] }
            }
            let rawReader: @Sendable () throws -> (Int) throws -> Int = {
                let reader = try RawThreadReader(shared)
                return { index in try rawKeys[index % keyCount].withUnsafeBytes { try reader.get($0) } }
            }
            let configurations = threadCounts.flatMap { threads in
                [("raw-lmdb", threads, rawReader), ("store", threads, storeReader)]
            }
            let rounds = context.quick ? 3 : 8
            let window: UInt64 = context.quick ? 60_000_000 : 250_000_000
            let turns = try takeTurns(configurations.count, rounds: rounds) { index in
                let (_, threads, reader) = configurations[index]
                return try runThreads(threads, duration: window, reader)
            }
            return configurations.indices.map { index in
                let (peer, threads, _) = configurations[index]
                var measurement = Measurement("get/int/\(threads)-threads/\(peer)", samples: turns[index].samples)
                measurement.operationsPerSecond = turns[index].medianPerSecond
                measurement.note =
                    (peer == "store" ? "store[key]" : "mdb_get")
                    + " of 1,000 keys in scattered order; ops/s = median over \(rounds) windows of the total reads/s"
                    + " of all threads"
                return measurement
            }
        }
    }
}

/// One thread's raw reader: its own read transaction, renewed and reset per get.
private final class RawThreadReader {
    let transaction: RawTransactionHandle
    let database: MDB_dbi

    init(_ lmdb: RawLMDB) throws {
        var begun: RawTransactionHandle?
        try checkLMDB(mdb_txn_begin(lmdb.environment, nil, UInt32(MDB_RDONLY), &begun), "mdb_txn_begin")
        guard let begun else { throw LMDBFailure(code: EINVAL, operation: "mdb_txn_begin") }
        mdb_txn_reset(begun)
        transaction = begun
        database = lmdb.database
    }

    deinit { mdb_txn_abort(transaction) }

    func get(_ key: UnsafeRawBufferPointer) throws -> Int {
        try checkLMDB(mdb_txn_renew(transaction), "mdb_txn_renew")
        defer { mdb_txn_reset(transaction) }
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var data = MDB_val()
        let code = mdb_get(transaction, database, &keyValue, &data)
        if code == MDB_NOTFOUND { return 0 }
        try checkLMDB(code, "mdb_get")
        return decodeRaw(UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size))
    }
}

private func fileAfterWrites(readers: Int, _ context: RunContext) throws -> Measurement {
    try context.withTemporaryDirectory("idle-readers") { path in
        var options = PersistentDefaults.Options()
        options.durability = .bounded(interval: .milliseconds(100))
        let store = try PersistentDefaults(path: path, options: options)
        let keys = (0..<100).map { PersistentDefaults.Key<String>("key-\($0)", default: "") }
        let stop = Atomic<Bool>(false)
        let done = DispatchGroup()
        for reader in 0..<readers {
            done.enter()
            Thread {
                var sum = 0
                while !stop.load(ordering: .relaxed) {
                    sum &+= store[keys[reader % keys.count]].utf8.count
                    // Load shape, not synchronisation: a watcher that reads now and then.
                    Thread.sleep(forTimeInterval: 0.02)
                }
                blackHole(sum)
                done.leave()
            }.start()
        }
        let sets = context.quick ? 2_000 : 20_000
        let payload = String(repeating: "x", count: 56)
        for index in 0..<sets { try store.set("\(payload)\(index)", for: keys[index % keys.count]) }
        stop.store(true, ordering: .relaxed)
        done.wait()
        try store.flush()
        let size =
            (try FileManager.default.attributesOfItem(atPath: path + "/data.mdb")[.size] as? NSNumber)?
            .doubleValue ?? 0
        return Measurement(
            "file/idle-readers/\(readers)-readers", value: size, unit: "bytes",
            note:
                "data.mdb after \(sets) bounded sets of 64-byte values over 100 keys, \(readers) threads reading every 20 ms"
        )
    }
}
