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
}
