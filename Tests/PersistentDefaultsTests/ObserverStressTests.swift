import Dispatch
import Foundation
import PDTestSupport
import Synchronization
import Testing

@testable import PersistentDefaults

/// Observer delivery under stress: cancellation racing with callbacks, slow queues, many
/// registrations, other processes (found by the sixth audit; each test failed before its fix).
@Suite struct ObserverStressTests {
    private static let counter = PersistentDefaults.Key<Int>("counter", default: 0)

    /// With `queue:`, a callback was dispatched to the queue when its commit was delivered and
    /// ran there whatever happened in between: a slow queue ran every change queued before
    /// `cancel()` after it had returned (5 of 5), where at most one callback already under way
    /// may still run.
    @Test func aCancelledObserverIsNotCalledOnItsQueueForChangesItHadQueued() throws {
        try withTemporaryStore { store, _, _ throws in
            let queue = DispatchQueue(label: "slow observer")
            let gate = DispatchSemaphore(value: 0)
            let cancelled = Locked(false)
            let lateCalls = Counter()
            let calls = Counter()
            let record: @Sendable () -> Void = {
                calls.increment()
                if cancelled.withLock({ $0 }) { lateCalls.increment() }
            }
            // The queue is busy until the gate opens: every callback waits behind it.
            queue.async { gate.wait() }
            let tokens = [
                store.observe(Self.counter, queue: queue) { _ in record() },
                store.observeCommits(queue: queue) { _ in record() },
                store.observe(prefix: "count", queue: queue) { _ in record() },
            ]
            for value in 1...5 { try store.set(value, for: Self.counter) }
            for token in tokens { token.cancel() }
            cancelled.withLock { $0 = true }
            gate.signal()
            queue.sync {}
            #expect(lateCalls.value <= 1, "\(lateCalls.value) of \(calls.value) callbacks ran after cancel() returned")
        }
    }

    /// Holds every reader slot of `store` (threads of their own) until the returned function is
    /// called.
    private static func fillReaderTable(of store: PersistentDefaults, slots: Int) -> @Sendable () -> Void {
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        for _ in 0..<slots {
            done.enter()
            Thread.detachNewThread {
                _ = try? store.read { _ in
                    entered.signal()
                    release.wait()
                }
                done.leave()
            }
        }
        for _ in 0..<slots { _ = entered.wait(timeout: .now() + 10) }
        return {
            for _ in 0..<slots { release.signal() }
            _ = done.wait(timeout: .now() + 10)
        }
    }

    /// An observer whose start could not be read (a full reader table) started at the registry's
    /// position, which stays where it was while nobody observes: the next delivery read the log
    /// from there and called the new observer for every change made before its registration
    /// (9 of 10 old commits, in every run), where the documented limit is only that the first
    /// change after it can be missed. The same for a commit observer (10 old records).
    @Test func anObserverWhoseStartCannotBeReadGetsNoChangeFromBeforeItsRegistration() throws {
        var options = PersistentDefaults.Options()
        options.maxReaders = 4
        options.readerSlotWait = .zero  // The full table's error at once, as the test expects.
        try withTemporaryStore(options: options) { store, _, log throws in
            for value in 1...10 { try store.set(value, for: Self.counter) }
            let release = Self.fillReaderTable(of: store, slots: 4)
            let changes = Events<KeyChange<Int>>()
            let records = Events<CommitRecord>()
            let tokens = [
                store.observe(Self.counter) { changes.append($0) },
                store.observeCommits { records.append($0) },
            ]
            release()
            #expect(log.all.contains { $0.code == .readersFull }, "\(log.all)")
            try store.set(11, for: Self.counter)
            try store.set(12, for: Self.counter)
            #expect(records.wait(forCount: 1, timeout: 5))
            #expect(changes.wait(forCount: 1, timeout: 5))
            // Every call is for a commit after the registration (11 may be missed: see the limit).
            #expect(changes.all.allSatisfy { $0.sequence > 10 }, "\(changes.all.map(\.sequence))")
            #expect(records.all.allSatisfy { $0.sequence > 10 }, "\(records.all.map(\.sequence))")
            #expect(changes.all.last?.newValue == 12)
            withExtendedLifetime(tokens) {}
        }
    }

    /// A delivery that could not read the log (a full reader table) was left for the next
    /// commit: with none coming, the change committed while a callback ran was never delivered
    /// (0 of 1 within 3 s, in every run), not even by the watcher's fallback check, which only
    /// looked for other processes' commits.
    ///
    /// Which thread keeps the one idle read transaction that a table of 4 slots allows decides
    /// whether the delivering thread's read fails; under the load of the whole suite the
    /// delivering thread sometimes kept it and read the log without a failure (seen once in CI).
    /// So the scenario is tried up to five times, each on a new store, until the read failed at
    /// least once; the change must be delivered in every try.
    @Test func aDeliveryThatCouldNotReadTheLogIsRetriedWithoutAnotherCommit() throws {
        var readFailed = false
        for _ in 1...5 where !readFailed {
            readFailed = try deliveryAfterAFullReaderTable()
        }
        #expect(readFailed, "no try made the delivery's read fail")
    }

    /// One try of the test above; whether the delivering thread's read of the log failed.
    private func deliveryAfterAFullReaderTable() throws -> Bool {
        var options = PersistentDefaults.Options()
        options.maxReaders = 4
        options.readerSlotWait = .zero  // The full table's error at once, as the test expects.
        options.fallbackCheckInterval = .milliseconds(20)
        return try withTemporaryStore(options: options) { store, _, log throws in
            let entered = DispatchSemaphore(value: 0)
            let gate = DispatchSemaphore(value: 0)
            let changes = Events<KeyChange<Int>>()
            let token = store.observe(Self.counter) { change in
                if change.newValue == 1 {
                    entered.signal()
                    _ = gate.wait(timeout: .now() + 10)
                }
                changes.append(change)
            }
            defer { token.cancel() }
            // A thread delivers 1 and waits in the callback; 2 is left for it to deliver next.
            let firstSet = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                store[Self.counter] = 1
                firstSet.signal()
            }
            #expect(entered.wait(timeout: .now() + 10) == .success)
            try store.set(2, for: Self.counter)
            // It reads 2 from the log while every reader slot is taken: the read fails.
            let release = Self.fillReaderTable(of: store, slots: 4)
            gate.signal()
            #expect(firstSet.wait(timeout: .now() + 10) == .success)
            release()
            #expect(changes.wait(forCount: 2, timeout: 3), "\(changes.all.map(\.newValue))")
            #expect(changes.all.map(\.newValue) == [1, 2])
            return log.all.contains { $0.code == .readersFull }
        }
    }
}
