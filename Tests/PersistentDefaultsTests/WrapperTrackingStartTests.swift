import Foundation
import Observation
import PDTestSupport
import Testing

@testable import PersistentDefaults

/// The first read of a `@PersistentDefault` starts the store observation behind its Observation
/// tracking. That start reads the store and may report an error to the user's handler: it held
/// the tracker's lock meanwhile, so a handler that read the property, or a read of it inside
/// `read { }` on another thread while the start waited for the map to be adopted (which waits
/// for that scope), deadlocked. Both tests timed out before the fix (3 of 3 runs).
@Suite(.serialized) struct WrapperTrackingStartTests {

    @Test func anErrorHandlerMayReadThePropertyWhoseFirstReadReportedTheError() throws {
        try withTemporaryDirectory { path throws in
            let reads = Guarded<[@Sendable () -> Void]>([])
            let errors = Guarded<[PersistentDefaultsError]>([])
            var options = PersistentDefaults.Options()
            options.errorHandler = { error in
                errors.withLock { $0.append(error) }
                // Once: the handler's own read reports the name again.
                let read = reads.withLock { $0.popLast() }
                read?()
            }
            let store = try PersistentDefaults(path: path, options: options)
            let property = PersistentDefault(PersistentDefaults.Key<Int>("", default: 3), in: store)
            let inner = Guarded<Int?>(nil)
            reads.withLock {
                $0 = [
                    {
                        let value = property.wrappedValue
                        inner.withLock { $0 = value }
                    }
                ]
            }
            let outer = Guarded<Int?>(nil)
            #expect(
                returns {
                    let value = property.wrappedValue
                    outer.withLock { $0 = value }
                }, "the handler's read deadlocked")
            #expect(inner.withLock { $0 } == 3)
            #expect(outer.withLock { $0 } == 3)
            #expect(errors.withLock { $0 }.allSatisfy { if case .invalidKeyName = $0 { true } else { false } })
        }
    }

    @Test func aFirstReadInsideAReadScopeDoesNotWaitForOneThatWaitsForTheScope() throws {
        try withTemporaryStore { store, path, log throws in
            let property = PersistentDefault(PersistentDefaults.Key<Int>("trackedInScope", default: 0), in: store)
            store[property.key] = 1
            let gate = store.core.environment.gate
            let steps = Guarded<[String]>([])
            let outside = Guarded<Int?>(nil)
            let outsideDone = DispatchSemaphore(value: 0)
            // The scope runs on a thread of its own, so that a deadlock fails the test instead of
            // hanging it.
            let scopeReturned = returns(within: 15) {
                do {
                    let inside = try store.read { _ in
                        let grown = try runFixture(["set-bytes", path, "blob", "\(4 << 20)"])
                        steps.withLock { $0.append("grown: \(grown.status)") }
                        // Its first read starts the tracking, whose read must adopt the larger
                        // map: that waits for this scope to end.
                        Thread.detachNewThread {
                            let value = property.wrappedValue
                            outside.withLock { $0 = value }
                            outsideDone.signal()
                        }
                        steps.withLock { $0.append("waits: \(eventually { gate.isExclusiveRaised })") }
                        // This scope's first read of the property must not wait for that one.
                        return property.wrappedValue
                    }
                    steps.withLock { $0.append("inside: \(inside)") }
                } catch {
                    steps.withLock { $0.append("\(error)") }
                }
            }
            #expect(scopeReturned, "the read inside the scope deadlocked")
            // After a deadlock, reading the property again would hang this test too.
            guard scopeReturned else { return }
            #expect(steps.withLock { $0 } == ["grown: 0", "waits: true", "inside: 1"])
            #expect(outsideDone.wait(timeout: .now() + 30) == .success)
            #expect(outside.withLock { $0 } == 1)
            // The tracking works: a commit that changes the key fires onChange.
            let fired = DispatchSemaphore(value: 0)
            withObservationTracking {
                _ = property.wrappedValue
            } onChange: {
                fired.signal()
            }
            store[property.key] = 2
            #expect(fired.wait(timeout: .now() + 10) == .success)
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }
}
