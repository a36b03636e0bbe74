import CPlatform
import Foundation
import PDTestSupport
import PersistentDefaults
import Synchronization

/// `observers/…`: what observers cost a set, and how long a commit takes to reach a callback.
let observerCases: [BenchmarkCase] = [
    BenchmarkCase(name: "observers/0") { try setWithObservers(0, name: "observers/0", $0) },
    BenchmarkCase(name: "observers/1") { try setWithObservers(1, name: "observers/1", $0) },
    BenchmarkCase(name: "observers/10000-other-keys") {
        try setWithObservers(10_000, name: "observers/10000-other-keys", $0)
    },
    BenchmarkCase(name: "observers/1000-other-prefixes") {
        try setWithObservers(1_000, name: "observers/1000-other-prefixes", $0) { store, index in
            store.observe(prefix: "group\(index).") { _ in }
        }
    },
    BenchmarkCase(name: "observers/cancel-with-10000-others") { [try cancelAmongMany($0)] },
    BenchmarkCase(name: "observers/delay-in-process") { [try delayInProcess($0)] },
    BenchmarkCase(name: "observers/delay-cross-process") { [try delayCrossProcess($0)] },
    BenchmarkCase(name: "observers/other-process-observes-key") {
        try setWhileOtherProcessesObserve(
            1, key: "key", name: "observers/other-process-observes-key", baseline: .unobservedKey("unobserved"), $0)
    },
    BenchmarkCase(name: "observers/100-idle-processes") {
        try setWhileOtherProcessesObserve(
            100, key: "other", name: "observers/100-idle-processes", baseline: .storeWithoutObservers, $0)
    },
    BenchmarkCase(name: "observers/idle-cpu-cross-process") { try idleCPU($0) },
]

/// A child `pdbench` that observes `key` of the store at `path`, prints "ready" and waits for
/// its standard input to close (`closeInput()`).
private func observingChild(path: String, key: String) throws -> ChildProcess {
    try ChildProcess(Products.currentExecutable, [childObserveFlag, path, key], input: .open)
}

/// What the sets of `setWhileOtherProcessesObserve` alternate with, sample by sample, so that the
/// machine's drift over seconds (±20–30 % here) cancels out of the ratio.
private enum ObservedBaseline {
    /// Sets of this key in the same store, which nobody observes (its wake-up bit must differ
    /// from the observed key's), measured as `<name>/unobserved`.
    case unobservedKey(String)
    /// Sets of "key" in a second store that no process observes, as `<name>/no-observers`.
    case storeWithoutObservers
}

/// A bounded `set` of "key" while `count` other processes observe `key` and sleep on the
/// store's wake-up channel, alternated with `baseline`.
private func setWhileOtherProcessesObserve(
    _ count: Int, key: String, name: String, baseline: ObservedBaseline, _ context: RunContext
) throws -> [Measurement] {
    try context.withTemporaryDirectory("observers-processes") { path in
        try context.withTemporaryDirectory("observers-processes-none") { basePath in
            var options = PersistentDefaults.Options()
            options.durability = .bounded(interval: .seconds(1))
            let store = try PersistentDefaults(path: path, options: options)
            let children = try (0..<count).map { _ in try observingChild(path: path, key: key) }
            defer {
                for child in children {
                    child.closeInput()
                    _ = child.waitForExit()
                }
            }
            for child in children where child.line(startingWith: "ready") == nil {
                throw BenchmarkError.setup("an observing child failed")
            }
            let written = PersistentDefaults.Key<Int>("key", default: -1)
            let note = "bounded durability; \(count) other process(es) observing \"\(key)\""
            let (baselineSet, baselineName, baselineNote): ((Int) throws -> Void, String, String)
            switch baseline {
            case .unobservedKey(let name):
                let unobserved = PersistentDefaults.Key<Int>(name, default: -1)
                baselineSet = { index in try store.set(index, for: unobserved) }
                (baselineName, baselineNote) = ("/unobserved", "sets of \"\(name)\" in the same store")
            case .storeWithoutObservers:
                let other = try PersistentDefaults(path: basePath, options: options)
                baselineSet = { index in try other.set(index, for: written) }
                (baselineName, baselineNote) = ("/no-observers", "sets in a store no process observes")
            }
            let samples = try measureInterleaved(
                .medium(quick: context.quick), baselineSet, { index in try store.set(index, for: written) })
            return [
                Measurement(name, samples: samples.second, note: note + "; alternating with " + baselineNote),
                Measurement(name + baselineName, samples: samples.first, note: baselineNote + ", alternated"),
            ]
        }
    }
}

/// The CPU time an observing process uses while nothing is written, as a share of one core, and
/// beside it, in the same window, that of its floor: a process of the same program whose only
/// thread wakes once a second (the fallback check's interval) and does nothing else. Both are
/// measured from outside (`/proc/PID/task/*/schedstat`), so the measurement costs neither process
/// anything; on this virtual machine a timed wake-up alone costs 0.08–0.5 ms of run time,
/// depending on what else wakes at that moment.
private func idleCPU(_ context: RunContext) throws -> [Measurement] {
    try context.withTemporaryDirectory("observers-idle") { path in
        _ = try PersistentDefaults(path: path)
        let seconds = context.quick ? 2 : 10
        let observer = try observingChild(path: path, key: "key")
        let floor = try ChildProcess(Products.currentExecutable, [childWakeFloorFlag], input: .open)
        defer {
            for child in [observer, floor] {
                child.closeInput()
                _ = child.waitForExit()
            }
        }
        guard observer.line(startingWith: "ready") != nil, floor.line(startingWith: "ready") != nil else {
            throw BenchmarkError.setup("an idle child failed")
        }
        // The first second holds the one-time cost of starting (the watcher thread's start and
        // first check, lazy binding): the figures are the steady idle cost.
        // Measuring idle cost: waiting out the intervals is the point, not synchronisation.
        Thread.sleep(forTimeInterval: 1)
        let processes = [observer, floor].map { $0.process.processIdentifier }
        let before = processes.map { cpuSeconds(ofProcess: $0) }
        Thread.sleep(forTimeInterval: Double(seconds))
        let after = processes.map { cpuSeconds(ofProcess: $0) }
        let percents = try zip(before, after).map { before, after in
            guard let before, let after else { throw BenchmarkError.setup("cannot read an idle child's run time") }
            return (after - before) / Double(seconds) * 100
        }
        return [
            Measurement(
                "observers/idle-cpu-cross-process", value: percents[0], unit: "%",
                note: "CPU (scheduler run time, read from outside) of a process observing one key for \(seconds) s"
                    + " with no writes, after 1 s of warm-up"),
            Measurement(
                "observers/idle-cpu-wake-floor", value: percents[1], unit: "%",
                note: "the same, in the same window, for a process whose one thread only wakes once a second:"
                    + " the floor of an idle observer"),
        ]
    }
}

/// The hidden argument that makes `pdbench` a process that only wakes once a second (the floor
/// of `observers/idle-cpu-cross-process`).
let childWakeFloorFlag = "--child-wake-floor"

/// The child of `observers/idle-cpu-wake-floor`: a thread that waits on a futex with the
/// fallback check's timeout (1 s) forever, as an idle observer's watcher does, with no check in
/// between; prints "ready" and returns when the parent closes standard input.
func runWakeFloorChild() -> Int32 {
    let nanoseconds = PersistentDefaults.Options().fallbackCheckInterval.nanoseconds
    // The word never moves: every wait ends by its timeout. The thread dies with the process.
    let thread = Thread {
        var word: UInt32 = 0
        while true { _ = pd_futex_wait(&word, 0, nanoseconds) }
    }
    thread.start()
    print("ready")
    fflush(nil)
    _ = FileHandle.standardInput.readDataToEndOfFile()
    return 0
}

/// The hidden argument that makes `pdbench` observe a key (the child of the cases above).
let childObserveFlag = "--child-observe"

/// The child of `observers/other-process-observes-key`, `observers/100-idle-processes` and
/// `observers/idle-cpu-cross-process`.
func runObserveChild(path: String, key: String) -> Int32 {
    var options = PersistentDefaults.Options()
    options.durability = .bounded(interval: .seconds(1))
    guard let store = try? PersistentDefaults(path: path, options: options) else { return 1 }
    let token = store.observe(PersistentDefaults.Key<Int>(key, default: 0)) { _ in }
    print("ready")
    fflush(nil)
    _ = FileHandle.standardInput.readDataToEndOfFile()  // Until the parent closes the pipe.
    token.cancel()
    return 0
}

/// A bounded-durability `set` of one key while `count` observers, made by `observe`, watch
/// other keys (by default: one key each). With observers, the sets alternate sample by sample with
/// those of a second store that has none (`<name>/no-observers`, the ratio's baseline): the same
/// set measured at different moments of a run moved by ±30 % here.
private func setWithObservers(
    _ count: Int, name: String, _ context: RunContext,
    observe: (PersistentDefaults, Int) -> ObservationToken = { store, index in
        store.observe(PersistentDefaults.Key<Int>("other\(index)", default: 0)) { _ in }
    }
) throws -> [Measurement] {
    try context.withTemporaryDirectory("observers") { path in
        try context.withTemporaryDirectory("observers-none") { basePath in
            var options = PersistentDefaults.Options()
            options.durability = .bounded(interval: .seconds(1))
            let store = try PersistentDefaults(path: path, options: options)
            let tokens = (0..<count).map { observe(store, $0) }
            let key = PersistentDefaults.Key<Int>("key", default: -1)
            let note = "bounded durability; observers on other keys"
            guard count > 0 else {
                let samples = try measure(.medium(quick: context.quick)) { index in try store.set(index, for: key) }
                return [Measurement(name, samples: samples, note: note)]
            }
            let baseline = try PersistentDefaults(path: basePath, options: options)
            let samples = try measureInterleaved(
                .medium(quick: context.quick), { index in try baseline.set(index, for: key) },
                { index in try store.set(index, for: key) })
            withExtendedLifetime(tokens) {}
            return [
                Measurement(name, samples: samples.second, note: note + "; alternating with a store that has none"),
                Measurement(name + "/no-observers", samples: samples.first, note: "the sets alternated with them"),
            ]
        }
    }
}

/// Cancelling one key observer's token while 10,000 observers of other keys stay.
private func cancelAmongMany(_ context: RunContext) throws -> Measurement {
    try context.withTemporaryDirectory("observers-cancel") { path in
        let store = try PersistentDefaults(path: path)
        let staying = (0..<10_000).map { store.observe(PersistentDefaults.Key<Int>("stay\($0)", default: 0)) { _ in } }
        let plan = Plan(warmup: 100, samples: context.quick ? 50 : 200, batch: 10)
        let leaving = (0..<(plan.warmup + plan.samples * plan.batch)).map {
            store.observe(PersistentDefaults.Key<Int>("leave\($0)", default: 0)) { _ in }
        }
        let samples = measure(plan) { index in leaving[index].cancel() }
        withExtendedLifetime(staying) {}
        return Measurement(
            "observers/cancel-with-10000-others", samples: samples,
            note: "ObservationToken.cancel() of a key observer while 10,000 observers of other keys stay")
    }
}

/// Nanoseconds from just before `set` to the key observer's callback, in this process (the
/// callback runs on the committing thread, after the commit, before `set` returns).
private func delayInProcess(_ context: RunContext) throws -> Measurement {
    try context.withTemporaryDirectory("observer-delay") { path in
        var options = PersistentDefaults.Options()
        options.durability = .bounded(interval: .seconds(1))
        let store = try PersistentDefaults(path: path, options: options)
        let key = PersistentDefaults.Key<Int>("key", default: -1)
        let started = Atomic<UInt64>(0)
        let delays = Mutex<[Double]>([])
        let token = store.observe(key) { _ in
            let now = monotonicNanoseconds()
            delays.withLock { $0.append(Double(now - started.load(ordering: .relaxed))) }
        }
        for index in 0..<(context.quick ? 300 : 5_000) {
            started.store(monotonicNanoseconds(), ordering: .relaxed)
            try store.set(index, for: key)
        }
        token.cancel()
        return Measurement(
            "observers/delay-in-process", samples: delays.withLock { Array($0.dropFirst(100)) },
            note: "from the set call to the callback (bounded durability)")
    }
}

/// Nanoseconds from a child process's `set` to this process's callback (CLOCK_MONOTONIC is
/// shared by all processes). The child paces its writes 2 ms apart.
private func delayCrossProcess(_ context: RunContext) throws -> Measurement {
    try context.withTemporaryDirectory("observer-delay-cross") { path in
        let store = try PersistentDefaults(path: path)
        let key = PersistentDefaults.Key<Int>("stamp", default: 0)
        store[key] = 0
        let count = context.quick ? 50 : 500
        let delays = Mutex<[Double]>([])
        let allArrived = DispatchSemaphore(value: 0)
        let token = store.observe(key) { change in
            let now = monotonicNanoseconds()
            let arrived = delays.withLock { delays in
                delays.append(Double(now) - Double(change.newValue))
                return delays.count
            }
            if arrived == count { allArrived.signal() }
        }
        let stamping = try runProcess(Products.currentExecutable, [childStampFlag, path, String(count)])
        guard stamping.exitedNormally, stamping.status == 0 else {
            throw BenchmarkError.setup("the stamping child failed")
        }
        // The last callbacks may still be on their way: wait for them, at most 5 s.
        _ = allArrived.wait(timeout: .now() + 5)
        token.cancel()
        let samples = delays.withLock { $0 }
        return Measurement(
            "observers/delay-cross-process", samples: samples,
            note: "child's set (bounded) to this process's callback; \(samples.count) of \(count) seen")
    }
}

/// The hidden argument that makes `pdbench` set a key to the current monotonic time N times.
let childStampFlag = "--child-stamp"

/// The child of `observers/delay-cross-process`.
func runStampChild(path: String, count: Int) -> Int32 {
    var options = PersistentDefaults.Options()
    options.durability = .bounded(interval: .seconds(1))
    guard let store = try? PersistentDefaults(path: path, options: options) else { return 1 }
    let key = PersistentDefaults.Key<Int>("stamp", default: 0)
    for _ in 0..<count {
        do { try store.set(Int(monotonicNanoseconds()), for: key) } catch { return 2 }
        usleep(2_000)  // Pacing, so each commit is delivered on its own.
    }
    return 0
}
