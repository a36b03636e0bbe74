import Foundation
import PDTestSupport
import PersistentDefaults
import Synchronization
import Testing

/// Runs `body` (passed the thread's index) on `count` new threads; the group is left when each ends.
private func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) -> DispatchGroup {
    let done = DispatchGroup()
    for index in 0..<count {
        done.enter()
        Thread.detachNewThread {
            defer { done.leave() }
            body(index)
        }
    }
    return done
}

/// Single reads hold the transaction gate through their thread's reader slot, not a shared lock;
/// the gate's exclusive side (map growth, adopting another process's map size, close) must still
/// wait for every such read and keep new ones out.
@Suite("Reads: the gate's per-thread shared side")
struct ReadGateTests {
    static let counter = PersistentDefaults.Key<Int>("counter", default: 0)
    static let mirror = PersistentDefaults.Key<Int>("mirror", default: 0)

    /// More reader threads than cores, each reading through its own slot, while a writer grows the
    /// map of this process several times: every read sees a commit no older than the last it saw,
    /// and the two keys one transaction writes together never disagree inside a snapshot.
    @Test func slotReadsOnMoreThreadsThanCoresWhileThisProcessGrowsTheMap() throws {
        var options = PersistentDefaults.Options()
        options.durability = .bounded(interval: .seconds(10))
        options.initialMapSize = 64 << 10
        try withTemporaryStore(options: options) { store, _, log throws in
            let initialMap = try store.statistics().mapSize
            let readers = max(ProcessInfo.processInfo.activeProcessorCount * 3, 6)
            let writes = 300
            let failures = Guarded<[String]>([])
            let reads = Counter()
            let done = onThreads(readers) { index in
                var last = 0
                while last < writes {
                    let seen = store[Self.counter]
                    reads.increment()
                    if seen < last { failures.withLock { $0.append("reader \(index): \(seen) after \(last)") } }
                    last = seen
                    if index % 3 == 0 {
                        let pair = try? store.read { ($0[Self.counter], $0[Self.mirror]) }
                        if let pair, pair.0 != pair.1 {
                            failures.withLock { $0.append("snapshot saw \(pair.0) and \(pair.1)") }
                        }
                    }
                }
            }
            for value in 1...writes {
                try store.write { transaction in
                    transaction[Self.counter] = value
                    transaction[Self.mirror] = value
                    // Every 30th commit stores 512 KiB more (and its log record as much): 10 MiB
                    // in all, past the map the store's creation left (2 MiB), whatever pages
                    // LMDB can reuse, so the map grows several times.
                    if value % 30 == 0 {
                        transaction[PersistentDefaults.Key<Data>("blob\(value)", default: Data())] = Data(
                            repeating: 1, count: 512 << 10)
                    }
                }
            }
            #expect(done.wait(timeout: .now() + 60) == .success)
            #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 }.prefix(5))")
            #expect(reads.value >= readers)
            let finalMap = try store.statistics().mapSize
            #expect(finalMap > initialMap, "map \(initialMap) → \(finalMap)")
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// Reader threads (more than cores) read through their slots while another process grows the
    /// map three times: each read that meets `MDB_MAP_RESIZED` adopts the size under the
    /// exclusive gate, which waits for the other threads' slot reads, and reads on.
    @Test func slotReadsOnManyThreadsWhileAnotherProcessGrowsTheMap() throws {
        try withTemporaryStore { store, path, log throws in
            store[Self.counter] = 1
            let stop = Atomic<Bool>(false)
            let wrong = Counter()
            let reads = Counter()
            let readers = max(ProcessInfo.processInfo.activeProcessorCount * 3, 6)
            let done = onThreads(readers) { _ in
                while !stop.load(ordering: .acquiring) {
                    if store[Self.counter] != 1 { wrong.increment() }
                    reads.increment()
                }
            }
            for (index, size) in [3 << 20, 6 << 20, 12 << 20].enumerated() {
                let result = try runFixture(["set-bytes", path, "blob\(index)", "\(size)"])
                #expect(result.status == 0, "\(result.output)")
            }
            // Reads after the growth, on every reader thread, before they stop.
            let afterGrowth = reads.value
            while reads.value < afterGrowth + readers * 10 { sched_yield() }
            stop.store(true, ordering: .releasing)
            #expect(done.wait(timeout: .now() + 30) == .success)
            #expect(wrong.value == 0)
            #expect(try store.value(for: PersistentDefaults.Key<Data>("blob2", default: Data())).count == 12 << 20)
            #expect(try store.statistics().mapSize >= 12 << 20)
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// Threads that open a handle of one path, read through their slots and drop it, so that the
    /// environment closes (exclusive gate) and opens again many times while other threads read
    /// through handles of their own; every read sees the stored value.
    @Test func readsWhileHandlesOfThePathCloseAndReopen() throws {
        try withTemporaryDirectory { path in
            try PersistentDefaults(path: path)[Self.counter] = 42
            let wrong = Guarded<[String]>([])
            let threads = max(ProcessInfo.processInfo.activeProcessorCount * 3, 6)
            let done = onThreads(threads) { index in
                for round in 0..<200 {
                    do {
                        let store = try PersistentDefaults(path: path)
                        for _ in 0..<(index % 2 == 0 ? 1 : 50) {
                            let value = try store.value(for: Self.counter)
                            if value != 42 {
                                wrong.withLock { $0.append("thread \(index) round \(round): \(value)") }
                            }
                        }
                    } catch {
                        wrong.withLock { $0.append("thread \(index) round \(round): \(error)") }
                    }
                }
            }
            #expect(done.wait(timeout: .now() + 60) == .success)
            #expect(wrong.withLock { $0 }.isEmpty, "\(wrong.withLock { $0 }.prefix(5))")
        }
    }

    /// A decode that fails inside a slot read gives its error and leaves the slot usable.
    @Test func aFailedDecodeInASlotReadLeavesTheSlotUsable() throws {
        try withTemporaryStore { store, _, _ throws in
            try store.set("text", for: PersistentDefaults.Key<String>("name", default: ""))
            let asInt = PersistentDefaults.Key<Int>("name", default: 0)
            for _ in 0..<3 {
                #expect(throws: PersistentDefaultsError.self) { try store.value(for: asInt) }
                store[Self.counter] += 1
            }
            #expect(store[Self.counter] == 3)
            #expect(try store.value(for: PersistentDefaults.Key<String>("name", default: "")) == "text")
        }
    }
}
