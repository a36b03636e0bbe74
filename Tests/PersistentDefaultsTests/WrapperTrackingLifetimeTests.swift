import Foundation
import Observation
import PDTestSupport
import Synchronization
import Testing

@testable import PersistentDefaults

/// The store observation behind a `@PersistentDefault`'s Observation tracking lives as long as
/// a wrapper of its key name does. It lived until the store closed: an app that made wrappers for
/// names made at run time kept one observer per name ever read (1,000 wrappers made, read and
/// dropped left 1,000 observers: failed 3 of 3 runs before the fix).
@Suite(.serialized) struct WrapperTrackingLifetimeTests {
    private func observerCount(_ store: PersistentDefaults) -> Int { store.core.observers.observerCount }

    @Test func droppedWrappersOfNamesMadeAtRunTimeLeaveNoObservers() throws {
        try withTemporaryStore { store, _, log throws in
            for index in 0..<1_000 {
                let wrapper = PersistentDefault(wrappedValue: 0, "user.\(index).x", in: store)
                #expect(wrapper.wrappedValue == 0)
            }
            #expect(observerCount(store) == 0)
            #expect(store.core.trackedNames.withLock { $0.count } == 0)
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    @Test func wrappersOfOneNameShareOneObserverUntilTheLastGoes() throws {
        try withTemporaryStore { store, _, log throws in
            let key = PersistentDefaults.Key<Int>("shared", default: 0)
            var first: PersistentDefault<Int>? = PersistentDefault(key, in: store)
            var second: PersistentDefault<Int>? = PersistentDefault(key, in: store)
            _ = first?.wrappedValue
            _ = second?.wrappedValue
            var copy = first  // a copy of a wrapper is the same wrapper
            #expect(observerCount(store) == 1)
            first = nil
            #expect(observerCount(store) == 1)
            copy = nil
            #expect(observerCount(store) == 1)
            // The remaining wrapper's tracking still fires.
            let fired = DispatchSemaphore(value: 0)
            withObservationTracking {
                _ = second?.wrappedValue
            } onChange: {
                fired.signal()
            }
            store[key] = 1
            #expect(fired.wait(timeout: .now() + 3) == .success)
            #expect(first == nil && copy == nil)
            second = nil
            #expect(observerCount(store) == 0)
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// A wrapper made after the last one of its name left the table, while that one's
    /// observation is being cancelled, observes the key through a tracker of its own.
    @Test func aWrapperMadeWhileTheLastOfItsNameIsTornDownSeesTheNextChange() throws {
        try withTemporaryStore { store, _, log throws in
            let key = PersistentDefaults.Key<Int>("torn", default: 0)
            let made = Guarded<PersistentDefault<Int>?>(nil)
            let fired = DispatchSemaphore(value: 0)
            store.core.beforeObservationStop.withLock {
                $0 = {
                    let wrapper = PersistentDefault(key, in: store)
                    withObservationTracking {
                        _ = wrapper.wrappedValue
                    } onChange: {
                        fired.signal()
                    }
                    made.withLock { $0 = wrapper }
                }
            }
            do {
                let old = PersistentDefault(key, in: store)
                _ = old.wrappedValue
            }
            store.core.beforeObservationStop.withLock { $0 = nil }
            #expect(made.withLock { $0 } != nil, "the hook ran")
            #expect(observerCount(store) == 1)
            store[key] = 1
            #expect(fired.wait(timeout: .now() + 3) == .success)
            made.withLock { $0 = nil }
            #expect(observerCount(store) == 0)
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// Threads make and drop wrappers of the same two names while another thread keeps changing
    /// those keys: a wrapper made while the last one of its name is being torn down must get an
    /// observation of its own, and every tracked read must see a later change.
    @Test func aWrapperMadeWhileTheLastOfItsNameGoesSeesEveryChange() throws {
        try withTemporaryDirectory { path throws in
            let store = try boundedStore(at: path)
            let keys = ["churn.a", "churn.b"].map { PersistentDefaults.Key<Int>($0, default: 0) }
            let stop = Atomic<Bool>(false)
            let setterDone = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                var value = 0
                while !stop.load(ordering: .relaxed) {
                    value += 1
                    for key in keys { store[key] = value }
                }
                setterDone.signal()
            }
            let workers = 4
            let rounds = 400
            let missed = Atomic<Int>(0)
            let tracked = Atomic<Int>(0)
            let workersDone = DispatchSemaphore(value: 0)
            for worker in 0..<workers {
                Thread.detachNewThread {
                    for round in 0..<rounds where missed.load(ordering: .relaxed) == 0 {
                        let wrapper = PersistentDefault(keys[(worker + round) % keys.count], in: store)
                        let fired = DispatchSemaphore(value: 0)
                        withObservationTracking {
                            _ = wrapper.wrappedValue
                        } onChange: {
                            fired.signal()
                        }
                        if fired.wait(timeout: .now() + 3) == .success {
                            tracked.add(1, ordering: .relaxed)
                        } else {
                            missed.add(1, ordering: .relaxed)
                        }
                    }
                    workersDone.signal()
                }
            }
            var finished = 0
            for _ in 0..<workers where workersDone.wait(timeout: .now() + 30) == .success { finished += 1 }
            stop.store(true, ordering: .relaxed)
            #expect(setterDone.wait(timeout: .now() + 10) == .success)
            #expect(finished == workers)
            #expect(missed.load(ordering: .relaxed) == 0)
            #expect(tracked.load(ordering: .relaxed) == workers * rounds)
            #expect(store.core.observers.observerCount == 0)
        }
    }
}
