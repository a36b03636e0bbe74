/// A comparison of two rows measured in the same run, against a target when there is one.
struct Ratio: Encodable {
    var name: String
    var target: String
    var measured: String
    /// `MET`, `MISSED`, `INFO` (no target) or `NOT MEASURED`.
    var verdict: String
}

/// Computes every ratio with a target from the rows of this run.
func computeRatios(_ rows: [Measurement]) -> [Ratio] {
    var byName: [String: Measurement] = [:]
    for row in rows { byName[row.name] = row }
    func p50(_ name: String) -> Double? { byName[name]?.summary?.p50 }
    func throughput(_ name: String) -> Double? {
        byName[name].flatMap { $0.operationsPerSecond ?? $0.summary?.operationsPerSecond }
    }
    var ratios: [Ratio] = []
    func ratio(
        _ name: String, target: String, _ numerator: Double?, _ denominator: Double?, describe: String,
        met: ((Double) -> Bool)?
    ) {
        guard let numerator, let denominator, denominator > 0 else {
            ratios.append(Ratio(name: name, target: target, measured: "-", verdict: "NOT MEASURED"))
            return
        }
        let value = numerator / denominator
        let verdict = met.map { $0(value) ? "MET" : "MISSED" } ?? "INFO"
        ratios.append(
            Ratio(name: name, target: target, measured: format(value, decimals: 2) + "× " + describe, verdict: verdict))
    }
    /// The two lines of a floor measured in the same run: the floor over raw LMDB, and the store
    /// over its floor (its Swift side). `names` are the two lines' names after `subject`.
    func floorRatios(
        _ subject: String, names: (floor: String, swiftSide: String), store: String, floor: String, raw: String
    ) {
        ratio(
            "\(subject): \(names.floor), the floor", target: "none", p50(floor), p50(raw), describe: "(p50)", met: nil)
        ratio(
            "\(subject): \(names.swiftSide) (the Swift side)", target: "none", p50(store), p50(floor),
            describe: "(p50)",
            met: nil)
    }
    func overhead(_ name: String, _ typed: String, _ raw: String) {
        guard let typed = p50(typed), let raw = p50(raw) else {
            ratios.append(Ratio(name: name, target: "< 1 µs", measured: "-", verdict: "NOT MEASURED"))
            return
        }
        let difference = typed - raw
        let claim = 100_000 / max(difference, 1)
        ratios.append(
            Ratio(
                name: name, target: "< 1 µs (another wrapper library claims ~100 µs for its own)",
                measured: formatDuration(difference) + " (\(format(claim, decimals: 0))× less than 0.1 ms)",
                verdict: difference < 1_000 ? "MET" : "MISSED"))
    }
    for kind in ["int", "struct"] {
        ratio(
            "typed get (\(kind)): store.value(for:) / raw LMDB", target: "≤ 1.10×",
            p50("get/\(kind)/store-value-for"), p50("get/\(kind)/raw-lmdb"), describe: "(p50)", met: { $0 <= 1.10 })
        ratio(
            "typed get (\(kind)): store[key] / raw LMDB", target: "≤ 1.10×",
            p50("get/\(kind)/store-subscript"), p50("get/\(kind)/raw-lmdb"), describe: "(p50)", met: { $0 <= 1.10 })
    }
    for kind in ["int", "struct"] {
        overhead(
            "wrapper overhead, get (\(kind)): @PersistentDefault − raw LMDB", "get/\(kind)/property-wrapper",
            "get/\(kind)/raw-lmdb")
        overhead(
            "wrapper overhead, set (\(kind)): @PersistentDefault (bounded) − raw LMDB put + MDB_NOSYNC commit",
            "set/\(kind)/property-wrapper", "set/\(kind)/raw-lmdb-nosync")
        overhead(
            "wrapper layer alone, set (\(kind)): @PersistentDefault − store.set (both bounded)",
            "set/\(kind)/property-wrapper", "set/\(kind)/store-bounded")
        ratio(
            "set of a tracked key (\(kind)): @PersistentDefault after a read / store.set (both bounded)",
            target: "-", p50("set/\(kind)/property-wrapper-read"), p50("set/\(kind)/store-bounded"),
            describe: "(p50)", met: nil)
    }
    overhead(
        "wrapper overhead, set (int): store.set sync − raw LMDB durable commit (fsync noise dominates)",
        "set/int/store-sync", "set/int/raw-lmdb-durable")
    for kind in ["int", "struct"] {
        ratio(
            "durable set (\(kind)), interleaved: store sync / raw LMDB put + durable commit", target: "≤ 1.15×",
            p50("set/\(kind)/durable-interleaved/store-sync"), p50("set/\(kind)/durable-interleaved/raw-lmdb"),
            describe: "(p50)", met: { $0 <= 1.15 })
        ratio(
            "durable set (\(kind)), separate runs: store sync / raw LMDB put + durable commit", target: "≤ 1.15×",
            p50("set/\(kind)/store-sync"), p50("set/\(kind)/raw-lmdb-durable"), describe: "(p50)",
            met: { $0 <= 1.15 })
        ratio(
            "bounded-loss set (\(kind)): UserDefaults.set / store bounded", target: "≥ 5× faster",
            p50("set/\(kind)/userdefaults-set"), p50("set/\(kind)/store-bounded"), describe: "faster (p50)",
            met: { $0 >= 5 })
        ratio(
            "bounded set (\(kind)), separate runs: store bounded / raw LMDB MDB_NOSYNC", target: "none",
            p50("set/\(kind)/store-bounded"), p50("set/\(kind)/raw-lmdb-nosync"), describe: "(p50)", met: nil)
        ratio(
            "durable set (\(kind)): UserDefaults set+synchronize / store sync", target: "none",
            p50("set/\(kind)/userdefaults-set-synchronize"), p50("set/\(kind)/store-sync"),
            describe: "(peer p50 / store p50)",
            met: nil)
        ratio(
            "durable set (\(kind)): SQLite WAL FULL / store sync", target: "none",
            p50("set/\(kind)/sqlite-wal-full"), p50("set/\(kind)/store-sync"), describe: "(peer p50 / store p50)",
            met: nil)
    }
    ratio(
        "bounded set (int), interleaved: store bounded / raw LMDB MDB_NOSYNC", target: "≤ 1.2×",
        p50("set/int/bounded-interleaved/store-bounded"), p50("set/int/bounded-interleaved/raw-lmdb-nosync"),
        describe: "(p50)", met: { $0 <= 1.2 })
    for (mode, store, raw) in [("durable", "store-sync", "raw-lmdb"), ("bounded", "store-bounded", "raw-lmdb-nosync")] {
        let prefix = "set/int/\(mode)-interleaved/"
        floorRatios(
            "\(mode) set (int)",
            names: (
                "LMDB's own part of the store's set / raw LMDB\(mode == "bounded" ? " MDB_NOSYNC" : "")",
                "store / LMDB's own part of its set"
            ),
            store: prefix + store, floor: prefix + "raw-lmdb-logged", raw: prefix + raw)
    }
    ratio(
        "transaction of 10 keys: store.write / raw LMDB", target: "none",
        p50("transaction/10-keys/store-write"), p50("transaction/10-keys/raw-lmdb"), describe: "(p50)", met: nil)
    ratio(
        "transaction of 1,000 keys: store.write / raw LMDB", target: "≤ 1.5×",
        p50("transaction/1000-keys/store-write"), p50("transaction/1000-keys/raw-lmdb"), describe: "(p50)",
        met: { $0 <= 1.5 })
    ratio(
        "transaction of 1,000 keys without fsync: store bounded / raw LMDB MDB_NOSYNC", target: "none",
        p50("transaction/1000-keys-nosync/store-bounded"), p50("transaction/1000-keys-nosync/raw-lmdb"),
        describe: "(p50)", met: nil)
    for (mode, store) in [("", "store-write"), ("-nosync", "store-bounded")] {
        let prefix = "transaction/1000-keys\(mode)/"
        let label = mode.isEmpty ? "" : " without fsync"
        floorRatios(
            "transaction of 1,000 keys\(label)",
            names: ("LMDB's own part of the store's work / raw LMDB", "store / LMDB's own part of its work"),
            store: prefix + store, floor: prefix + "raw-lmdb-logged", raw: prefix + "raw-lmdb")
    }
    ratio(
        "typed get, 1,000 keys scattered: store[key] / raw mdb_get", target: "≤ 1.05×",
        p50("get/int/1000-keys-scattered/store-subscript"), p50("get/int/1000-keys-scattered/raw-lmdb"),
        describe: "(p50)", met: { $0 <= 1.05 })
    floorRatios(
        "typed get, 1,000 keys scattered",
        names: (
            "raw mdb_get in the store's layout (named database) / raw mdb_get",
            "store[key] / raw mdb_get in the store's layout"
        ),
        store: "get/int/1000-keys-scattered/store-subscript", floor: "get/int/1000-keys-scattered/raw-lmdb-named",
        raw: "get/int/1000-keys-scattered/raw-lmdb")
    ratio(
        "@PersistentDefault get, 1,000 wrappers / store[key]", target: "≤ 1.05×",
        p50("get/int/1000-keys-scattered/property-wrapper"), p50("get/int/1000-keys-scattered/store-subscript"),
        describe: "(p50)", met: { $0 <= 1.05 })
    ratio(
        "the floor of that: store[key] + ObservationRegistrar.access / store[key]", target: "none",
        p50("get/int/1000-keys-scattered/store-subscript-and-registrar-access"),
        p50("get/int/1000-keys-scattered/store-subscript"), describe: "(p50)", met: nil)
    ratio(
        "@PersistentDefault get, 1,000 wrappers / (store[key] + ObservationRegistrar.access)", target: "none",
        p50("get/int/1000-keys-scattered/property-wrapper"),
        p50("get/int/1000-keys-scattered/store-subscript-and-registrar-access"), describe: "(p50)", met: nil)
    ratio(
        "@PersistentDefault get, 1,000 wrappers / raw mdb_get", target: "none",
        p50("get/int/1000-keys-scattered/property-wrapper"), p50("get/int/1000-keys-scattered/raw-lmdb"),
        describe: "(p50)", met: nil)
    for peer in ["store", "raw-lmdb"] {
        ratio(
            "reads, 2 threads / 1 (\(peer))", target: peer == "store" ? "≥ 1.8×" : "none",
            throughput("get/int/2-threads/\(peer)"), throughput("get/int/1-threads/\(peer)"), describe: "reads/s",
            met: peer == "store" ? { $0 >= 1.8 } : nil)
        ratio(
            "reads, 4 threads on 2 cores / 1 (\(peer))", target: peer == "store" ? "≥ 1.6×" : "none",
            throughput("get/int/4-threads/\(peer)"), throughput("get/int/1-threads/\(peer)"), describe: "reads/s",
            met: peer == "store" ? { $0 >= 1.6 } : nil)
    }
    ratio(
        "data.mdb after a write-heavy run: 32 idle readers / none", target: "≤ 2×",
        byName["file/idle-readers/32-readers"]?.value, byName["file/idle-readers/0-readers"]?.value,
        describe: "(file size)", met: { $0 <= 2 })
    for scale in ["10k", "100k", "1m"] {
        if let value = byName["scale/\(scale)-keys/store-file-vs-logical"]?.value {
            ratios.append(
                Ratio(
                    name: "store file / logical bytes (\(scale) keys)", target: "≤ 2.5×",
                    measured: format(value, decimals: 2) + "×", verdict: value <= 2.5 ? "MET" : "MISSED"))
        }
        if let raw = byName["scale/\(scale)-keys/raw-lmdb-file-vs-logical"]?.value {
            ratios.append(
                Ratio(
                    name: "raw LMDB file / logical bytes (\(scale) keys), the floor", target: "none",
                    measured: format(raw, decimals: 2) + "×", verdict: "INFO"))
        }
    }
    ratio(
        "bounded set of a 1 MiB value: store / raw LMDB MDB_NOSYNC", target: "none",
        p50("set/data-1mib/store-bounded"), p50("set/data-1mib/raw-lmdb-nosync"), describe: "(p50, alternating)",
        met: nil)
    ratio(
        "8 concurrent durable writers / 1 writer", target: "≥ 4× commits/s",
        throughput("concurrent/8-writers"), throughput("concurrent/1-writers"), describe: "commits/s", met: { $0 >= 4 })
    ratio(
        "10,000 observers on other keys: set / set with none", target: "≤ 1.05×",
        p50("observers/10000-other-keys"), p50("observers/10000-other-keys/no-observers"),
        describe: "(p50, alternating with a store that has none)", met: { $0 <= 1.05 })
    ratio(
        "1,000 prefix observers of other prefixes: set / set with none", target: "none",
        p50("observers/1000-other-prefixes"), p50("observers/1000-other-prefixes/no-observers"),
        describe: "(p50, alternating)", met: nil)
    ratio(
        "1 observer on another key: set / set with none", target: "none",
        p50("observers/1"), p50("observers/1/no-observers"), describe: "(p50, alternating)", met: nil)
    ratio(
        "another process observes the key: set / set of a key nobody observes", target: "≤ 1.05×",
        p50("observers/other-process-observes-key"), p50("observers/other-process-observes-key/unobserved"),
        describe: "(p50, alternating with sets of a key nobody observes)", met: { $0 <= 1.05 })
    ratio(
        "100 idle observing processes: set / set with none", target: "≤ 1.10×",
        p50("observers/100-idle-processes"), p50("observers/100-idle-processes/no-observers"),
        describe: "(p50, alternating with a store no process observes)", met: { $0 <= 1.10 })
    if let delay = byName["observers/delay-cross-process"]?.summary {
        ratios.append(
            Ratio(
                name: "commit to callback across processes", target: "p50 ≤ 0.2 ms, p99 ≤ 2 ms",
                measured: "p50 " + formatDuration(delay.p50) + ", p99 " + formatDuration(delay.p99),
                verdict: delay.p50 <= 200_000 && delay.p99 <= 2_000_000 ? "MET" : "MISSED"))
    }
    if let idle = byName["observers/idle-cpu-cross-process"]?.value {
        // The target allows the fallback check's wake-ups: one a second, whose own cost on this
        // machine is `observers/idle-cpu-wake-floor`.
        let floor = byName["observers/idle-cpu-wake-floor"]?.value
        let met = idle <= 0.02 || floor.map { idle <= max($0 * 1.5, $0 + 0.01) } == true
        ratios.append(
            Ratio(
                name: "idle observing process, CPU", target: "≤ 0.02 % of a core, or one wake-up a second",
                measured: "\((idle * 1000).rounded() / 1000) %"
                    + (floor.map { " (a thread that only wakes once a second: \(($0 * 1000).rounded() / 1000) %)" }
                        ?? ""),
                verdict: met ? "MET" : "MISSED"))
    }
    ratio(
        "read of a mirrored key / of any other key", target: "≤ 1.02×", p50("fleet/get-mirrored-key"),
        p50("fleet/get-other-key"), describe: "(p50)", met: { $0 <= 1.02 })
    if let delay = byName["fleet/put-to-observer"]?.summary {
        ratios.append(
            Ratio(
                name: "etcd put to an observer on another host (loopback)", target: "p99 ≤ 25 ms",
                measured: "p50 " + formatDuration(delay.p50) + ", p99 " + formatDuration(delay.p99),
                verdict: delay.p99 <= 25_000_000 ? "MET" : "MISSED"))
    }
    return ratios
}
