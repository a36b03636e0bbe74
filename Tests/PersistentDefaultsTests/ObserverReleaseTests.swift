import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

/// Cancelling an observer releases its callback, and with it whatever the callback captured,
/// whose release may run the library again: a `@PersistentDefault` wrapper that was the last of
/// its key name cancels that name's tracking observation, an `ObservationToken` cancels its
/// observer. Both take the observer registry's lock. The callback was released under that lock,
/// so the cancellation waited for a lock its own thread held, for ever (each test: its thread
/// never returned, 3 of 3 runs, before the fix).
@Suite struct ObserverReleaseTests {
    /// Runs `body` on a thread of its own and tells whether it returned within 5 s: a thread that
    /// deadlocked stays blocked (with the store it holds) instead of blocking the test.
    private func returns(_ body: @escaping @Sendable () -> Void) -> Bool {
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            body()
            done.signal()
        }
        return done.wait(timeout: .now() + 5) == .success
    }

    /// An observer of `other` whose callback holds the only wrapper of `name`, which it read, so
    /// that the wrapper's tracking observes `name`.
    private func observer(of other: String, holdingTheWrapperOf name: String, in store: PersistentDefaults)
        -> ObservationToken
    {
        let wrapper = PersistentDefault(wrappedValue: 0, name, in: store)
        _ = wrapper.wrappedValue
        return store.observe(PersistentDefaults.Key<Int>(other, default: 0)) { [wrapper] _ in _ = wrapper.key }
    }

    @Test func cancellingAnObserverWhoseCallbackHeldTheLastWrapperOfATrackedNameReturns() throws {
        try withTemporaryDirectory { path throws in
            let store = try PersistentDefaults(path: path)
            let returned = returns {
                let token = observer(of: "other", holdingTheWrapperOf: "tracked", in: store)
                #expect(store.core.observers.observerCount == 2)
                token.cancel()
            }
            #expect(returned, "the cancellation deadlocked")
            guard returned else { return }
            #expect(store.core.observers.observerCount == 0)
            #expect(store.core.trackedNames.withLock { $0.count } == 0)
        }
    }

    @Test func cancellingAnObserverWhoseCallbackHeldAnotherObserversTokenReturns() throws {
        try withTemporaryDirectory { path throws in
            let store = try PersistentDefaults(path: path)
            let returned = returns {
                let outer: ObservationToken = {
                    let inner = store.observe(prefix: "inner.") { _ in }
                    return store.observeCommits { [inner] _ in _ = inner }
                }()
                #expect(store.core.observers.observerCount == 2)
                outer.cancel()
            }
            #expect(returned, "the cancellation deadlocked")
            guard returned else { return }
            #expect(store.core.observers.observerCount == 0)
        }
    }
}
