import Foundation
import PDTestSupport
import Synchronization
import Testing

@testable import PersistentDefaults

#if canImport(Glibc)
    import Glibc
#endif

/// The timer that empties reader slots nobody reads through (`ReaderSlots.reap`).
@Suite struct ReaderSlotReaperTests {
    static let counter = PersistentDefaults.Key<Int>("counter", default: 0)

    /// Threads that read once and then idle give their reader slots back within two of the
    /// reaper's intervals, their next reads work, and the reaper stops once no slot holds a
    /// transaction (an idle process is not woken).
    @Test func idleThreadsSlotsAreEmptiedAndTheReaperStops() throws {
        let store = try PersistentDefaults.temporary()
        store[Self.counter] = 3
        let slots = store.core.environment.readerSlots
        let ours = { store.readerTableEntries().filter { $0.processID == getpid() }.count }
        let read = DispatchSemaphore(value: 0)
        let again = DispatchSemaphore(value: 0)
        let values = Guarded<[Int]>([])
        let done = DispatchGroup()
        let threads = 6
        for _ in 0..<threads {
            done.enter()
            Thread.detachNewThread {
                values.withLock { $0.append(store[Self.counter]) }
                read.signal()
                again.wait()  // Idle, alive.
                values.withLock { $0.append(store[Self.counter]) }
                done.leave()
            }
        }
        for _ in 0..<threads { #expect(read.wait(timeout: .now() + 10) == .success) }
        // Kept (unless this thread was held up past the reaper's two looks).
        let reapedBefore = slots.reapedSlots.load(ordering: .relaxed)
        #expect(ours() >= 1 || reapedBefore > 0, "\(store.readerTable())")
        #expect(eventually(timeout: 10) { ours() == 0 }, "\(store.readerTable())")
        #expect(slots.reapedSlots.load(ordering: .relaxed) >= 1)
        #expect(eventually(timeout: 10) { !slots.isReaperArmed })
        store[Self.counter] = 4
        for _ in 0..<threads { again.signal() }
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(values.withLock { $0 } == Array(repeating: 3, count: threads) + Array(repeating: 4, count: threads))
        // Those reads kept slots again and armed the reaper again, which empties them again.
        #expect(eventually(timeout: 10) { ours() == 0 && !slots.isReaperArmed }, "\(store.readerTable())")
    }

    /// The reaper marks and empties slots while more threads than cores read through them, with a
    /// writer: a slot in use is never emptied under its read, a marked slot's read takes it back,
    /// and every read sees the counter in order. 16 threads on 2 cores; half of them pause until
    /// the reaper has emptied a slot.
    @Test func readsRacingTheReaperSeeEveryCommitInOrder() throws {
        let store = try PersistentDefaults.temporary(
            options: {
                var options = PersistentDefaults.Options()
                options.durability = .bounded(interval: .seconds(10))
                return options
            }())
        let slots = store.core.environment.readerSlots
        let failures = Guarded<[String]>([])
        let writes = 40_000
        let stop = Atomic<Bool>(false)
        onJoinedThreads(17) { index in
            if index == 16 {
                for value in 1...writes { store[Self.counter] = value }
                stop.store(true, ordering: .releasing)
                return
            }
            var last = 0
            var reads = 0
            while !stop.load(ordering: .acquiring) {
                let seen = store[Self.counter]
                if seen < last { failures.withLock { $0.append("thread \(index): \(seen) after \(last)") } }
                last = seen
                reads += 1
                // Half the threads pause once, until the reaper has emptied a slot (their own,
                // idle meanwhile), then read on through a slot that begins again.
                if index % 2 == 0, reads == 2_000 {
                    let before = slots.reapedSlots.load(ordering: .relaxed)
                    _ = eventually(timeout: 10) { slots.reapedSlots.load(ordering: .relaxed) > before }
                }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 }.prefix(5))")
        #expect(store[Self.counter] == writes)
        #expect(slots.reapedSlots.load(ordering: .relaxed) > 0, "the reaper never acted")
    }
}
