import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Slots of the reader table in use.
private func liveReaderSlots(_ store: PersistentDefaults) -> Int { store.readerTableEntries().count }

@Suite("Reads: per-thread read transactions")
struct ReaderSlotTests {
    static let counter = PersistentDefaults.Key<Int>("counter", default: 0)

    @Test func moreReaderThreadsThanCoresSeeEveryCommitInOrderAndReleaseTheirSlotsAtExit() throws {
        var options = PersistentDefaults.Options()
        options.durability = .bounded(interval: .seconds(10))
        try withTemporaryStore(options: options) { store, _, log in
            let before = liveReaderSlots(store)
            let writes = Int(ProcessInfo.processInfo.environment["PD_SOAK_WRITES"] ?? "") ?? 2_000  // tools/read-soak
            let readers = max(ProcessInfo.processInfo.activeProcessorCount * 4, 8)
            let failures = Guarded<[String]>([])
            onJoinedThreads(readers + 1) { index in
                if index == readers {
                    for value in 1...writes { store[Self.counter] = value }
                    return
                }
                var last = 0
                while last < writes {
                    let seen = store[Self.counter]
                    if seen < last { failures.withLock { $0.append("thread \(index): \(seen) after \(last)") } }
                    last = seen
                    // A nested read on the same thread uses a transaction of its own.
                    if index % 2 == 0,
                        let outer = try? store.read({ snapshot in (snapshot[Self.counter], store[Self.counter]) }),
                        outer.1 < outer.0
                    {
                        failures.withLock { $0.append("nested read \(outer.1) older than its snapshot \(outer.0)") }
                    }
                }
            }
            #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 }.prefix(5))")
            #expect(store[Self.counter] == writes)
            // The joined threads' kept transactions were aborted at their exit.
            #expect(liveReaderSlots(store) <= before + 1, "\(store.readerTable())")
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// The reader table has the size of the lock file, which the process that created it chose
    /// (`Options.maxReaders`: "Only the process that creates the lock file sets it"). A process
    /// that opens the store with a larger `maxReaders` must still keep idle transactions on at
    /// most a quarter of the real table: its threads that read once and live on must not take
    /// every slot, or other processes cannot read at all.
    @Test func idleThreadsLeaveReaderSlotsForOtherProcessesWhenTheLockFileIsSmaller() throws {
        try withTemporaryDirectory { path throws in
            // The creator sizes the lock file for 8 readers and keeps it in use (one slot).
            let keeper = try ChildProcess(fixture: ["hold-read", path], environment: ["PD_MAX_READERS": "8"])
            defer { keeper.kill() }
            #expect(keeper.wait(for: "holding"))
            let store = try PersistentDefaults(path: path)  // maxReaders 126, the default
            store[Self.counter] = 5
            #expect(try store.statistics().maxReaders == 8)
            // Threads of this process that read once and stay alive, as many as slots are free.
            let free = 8 - store.readerTableEntries().count
            let read = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let finished = DispatchGroup()
            for _ in 0..<free {
                finished.enter()
                Thread.detachNewThread {
                    _ = store[Self.counter]
                    read.signal()
                    release.wait()
                    finished.leave()
                }
            }
            for _ in 0..<free { #expect(read.wait(timeout: .now() + 10) == .success) }
            let ours = store.readerTableEntries().filter { $0.processID == getpid() }.count
            // Another process reads the store while those threads idle.
            let probe = try runFixture(["probe-read-only", path, "counter"])
            for _ in 0..<free { release.signal() }
            #expect(finished.wait(timeout: .now() + 10) == .success)
            #expect(probe.output.contains("read: 5"), "\(probe.output); this process held \(ours) of 8 slots")
            #expect(ours <= 2, "\(store.readerTable())")
        }
    }

    @Test func threadsThatKeepReadTransactionsOutliveTheStoreAndReadTheNextOne() throws {
        try withTemporaryDirectory { path in
            let opened = Guarded<PersistentDefaults?>(try PersistentDefaults(path: path))
            opened.withLock { $0?[Self.counter] = 7 }
            let firstRead = DispatchGroup()
            let closed = DispatchSemaphore(value: 0)
            let results = Guarded<[Int]>([])
            let threads = 6
            for _ in 0..<threads { firstRead.enter() }
            let done = DispatchGroup()
            done.enter()
            Thread.detachNewThread {
                onJoinedThreads(threads) { _ in
                    // No reference kept past the read: the main thread's release must close it.
                    let first = opened.withLock { $0?[Self.counter] } ?? -1
                    firstRead.leave()
                    closed.wait()
                    // The first store is closed: its environment emptied this thread's slot.
                    let reopened = try? PersistentDefaults(path: path)
                    let second = reopened?[Self.counter] ?? -1
                    results.withLock { $0 += [first, second] }
                }
                done.leave()
            }
            firstRead.wait()
            opened.withLock { $0 = nil }  // The last handle: the environment closes here.
            for _ in 0..<threads { closed.signal() }
            done.wait()
            #expect(results.withLock { $0 } == Array(repeating: 7, count: 2 * threads))
            let store = try PersistentDefaults(path: path)
            #expect(liveReaderSlots(store) <= 1, "\(store.readerTable())")
        }
    }
}
