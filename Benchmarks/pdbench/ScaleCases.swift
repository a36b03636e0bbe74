import Foundation
import PDTestSupport
import PersistentDefaults

/// `scale/<n>-keys/…`: a store holding n Int keys — get p50, open time, file size — and
/// UserDefaults' open time with the same data.
///
/// Quick mode measures 10k keys only; full mode 10k, 100k and 1M.
func scaleSizes(quick: Bool) -> [Int] { quick ? [10_000] : [10_000, 100_000, 1_000_000] }

let scaleCases: [BenchmarkCase] = [10_000, 100_000, 1_000_000].map { count in
    BenchmarkCase(name: "scale/\(label(count))-keys") { context in
        guard scaleSizes(quick: context.quick).contains(count) else { return [] }
        return try scale(count: count, context)
    }
}

/// `10k`, `100k`, `1m`.
private func label(_ count: Int) -> String {
    count >= 1_000_000 ? "\(count / 1_000_000)m" : "\(count / 1_000)k"
}

private func scale(count: Int, _ context: RunContext) throws -> [Measurement] {
    let prefix = "scale/\(label(count))-keys/"
    var results: [Measurement] = []
    try context.withTemporaryDirectory("scale") { path in
        let names = (0..<count).map { "key-\($0)" }
        // Bulk import: 10,000 keys per transaction, each transaction one commit-log record.
        do {
            var options = PersistentDefaults.Options()
            options.durability = .bounded(interval: .seconds(1))
            let store = try PersistentDefaults(path: path, options: options)
            let batch = 10_000
            for start in stride(from: 0, to: count, by: batch) {
                try store.write { transaction in
                    for index in start..<min(start + batch, count) {
                        transaction[PersistentDefaults.Key<Int>(names[index], default: 0)] = index
                    }
                }
            }
            try store.flush()
        }  // The last handle goes here: the store is closed.

        var openSamples: [Double] = []
        for _ in 0..<(context.quick ? 5 : 20) {
            let before = monotonicNanoseconds()
            let store = try PersistentDefaults(path: path)
            openSamples.append(Double(monotonicNanoseconds() - before))
            withExtendedLifetime(store) {}
        }
        results.append(Measurement(prefix + "store-open", samples: openSamples, note: "reopen, page cache warm"))

        let store = try PersistentDefaults(path: path)
        var generator = SystemRandomNumberGenerator()
        let probes = (0..<4_096).map { _ in
            PersistentDefaults.Key<Int>(names[Int.random(in: 0..<count, using: &generator)], default: -1)
        }
        var sum = 0
        let samples = try measure(.fast(quick: context.quick)) { index in
            sum &+= try store.value(for: probes[index & 4_095])
        }
        blackHole(sum)
        results.append(Measurement(prefix + "store-get-random", samples: samples))

        let fileSize =
            (try FileManager.default.attributesOfItem(atPath: path + "/data.mdb")[.size] as? NSNumber)?
            .doubleValue ?? 0
        let logical = Double(names.reduce(0) { $0 + $1.utf8.count + 8 })
        results.append(Measurement(prefix + "store-file-bytes", value: fileSize, unit: "bytes"))
        results.append(
            Measurement(
                prefix + "store-file-vs-logical", value: fileSize / logical, unit: "x",
                note: "data.mdb size / (key name bytes + 8 bytes per Int); includes the commit log"))
        let statistics = try store.statistics()
        let logBytes =
            statistics.log.pageSize
            * (statistics.log.branchPages + statistics.log.leafPages
                + statistics.log.overflowPages)
        let valueBytes =
            statistics.values.pageSize
            * (statistics.values.branchPages + statistics.values.leafPages
                + statistics.values.overflowPages)
        results.append(
            Measurement(
                prefix + "store-log-vs-logical", value: Double(logBytes) / logical, unit: "x",
                note: "pages of the commit log / logical bytes: one record of every imported key"))
        results.append(
            Measurement(
                prefix + "store-values-vs-logical", value: Double(valueBytes) / logical, unit: "x",
                note: "pages of the values database / logical bytes"))
        results.append(try rawFileVsLogical(names: names, logical: logical, prefix: prefix, context))
    }
    results += try userDefaultsOpen(count: count, names: prefix)
    return results
}

/// The floor of `store-file-vs-logical`: raw LMDB (one unnamed database, no log) holding the
/// same keys, each an 8-byte Int, imported in the same order and batches.
private func rawFileVsLogical(
    names: [String], logical: Double, prefix: String, _ context: RunContext
) throws -> Measurement {
    try context.withTemporaryDirectory("scale-raw") { path in
        do {
            let lmdb = try RawLMDB(path: path, noSync: true)
            let batch = 10_000
            for start in stride(from: 0, to: names.count, by: batch) {
                try lmdb.write { transaction in
                    for index in start..<min(start + batch, names.count) {
                        try Array(names[index].utf8).withUnsafeBytes { key in
                            try withUnsafeBytes(of: index) { try lmdb.put(transaction, key: key, value: $0) }
                        }
                    }
                }
            }
        }  // Closed here.
        let fileSize =
            (try FileManager.default.attributesOfItem(atPath: path + "/data.mdb")[.size] as? NSNumber)?
            .doubleValue ?? 0
        return Measurement(
            prefix + "raw-lmdb-file-vs-logical", value: fileSize / logical, unit: "x",
            note: "the floor: raw LMDB, one unnamed database, the same keys and batches, no log")
    }
}

/// Writes a suite's plist holding `count` keys, then times, in child processes, opening the
/// suite and reading one key (a new process, because Foundation caches a suite's contents
/// in-process), and, in this process, setting one key of the full domain.
///
/// The plist is written directly where Foundation keeps it on Linux (`$XDG_CONFIG_HOME` or
/// `~/.config`, `<suite>.plist`): through `UserDefaults`, n sets before a `synchronize()` take
/// time quadratic in n (a profile shows `CFArrayContainsValue` under
/// `_CFApplicationPreferencesSet`, also for `setPersistentDomain`); 100k keys took minutes.
private func userDefaultsOpen(count: Int, names prefix: String) throws -> [Measurement] {
    let suite = "pdbench-" + UUID().uuidString
    let environment = ProcessInfo.processInfo.environment
    let directory = environment["XDG_CONFIG_HOME"] ?? (NSHomeDirectory() + "/.config")
    let file = directory + "/" + suite + ".plist"
    var domain: [String: Any] = [:]
    for index in 0..<count { domain["key-\(index)"] = index }
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    try PropertyListSerialization.data(fromPropertyList: domain, format: .xml, options: 0)
        .write(to: URL(fileURLWithPath: file))
    defer { try? FileManager.default.removeItem(atPath: file) }  // Best effort, as for temp directories.
    var samples: [Double] = []
    for _ in 0..<5 {
        samples.append(try childMeasuresUserDefaultsOpen(suite: suite))
    }
    guard let defaults = UserDefaults(suiteName: suite) else {
        throw BenchmarkError.setup("UserDefaults(suiteName: \(suite)) returned nil")
    }
    // No removePersistentDomain: it removes key by key, also quadratic; the deferred file
    // removal above cleans up, and this process never synchronizes the suite again.
    guard defaults.integer(forKey: "key-1") == 1 else { throw BenchmarkError.setup("the suite did not load") }
    let sets = measure(Plan(warmup: 2, samples: 20, batch: 1)) { index in
        defaults.set(index, forKey: "key-1")
    }
    return [
        Measurement(prefix + "userdefaults-open", samples: samples, note: "child process: suite + first read"),
        Measurement(prefix + "userdefaults-set", samples: sets, note: "set of one key in a domain of this many keys"),
    ]
}

private func childMeasuresUserDefaultsOpen(suite: String) throws -> Double {
    let child = try runProcess(Products.currentExecutable, [childOpenFlag, suite])
    guard child.exitedNormally, child.status == 0,
        let nanoseconds = Double(child.output.trimmingCharacters(in: .whitespacesAndNewlines))
    else {
        throw BenchmarkError.setup("the UserDefaults open child failed")
    }
    return nanoseconds
}

/// The hidden argument that makes `pdbench` time one UserDefaults open and print nanoseconds.
let childOpenFlag = "--child-userdefaults-open"

/// Child side: opens the suite, reads one key, prints how long that took.
func runUserDefaultsOpenChild(suite: String) -> Int32 {
    let before = monotonicNanoseconds()
    guard let defaults = UserDefaults(suiteName: suite) else { return 1 }
    let value = defaults.integer(forKey: "key-1")
    let elapsed = monotonicNanoseconds() - before
    guard value == 1 else { return 2 }
    print(elapsed)
    return 0
}
