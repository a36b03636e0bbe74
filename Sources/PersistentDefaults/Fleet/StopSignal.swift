import Foundation

/// A flag that a mirror's threads sleep on between attempts: `wait(for:)` returns early, with
/// `true`, once `raise()` was called, so `stop()` never waits for a backoff or a check interval.
final class StopSignal: Sendable {
    /// `NSCondition` is a pthread mutex and condition variable (visible to ThreadSanitizer).
    private let condition = NSCondition()
    private let raised = Locked<Bool>(false)

    var isRaised: Bool { raised.withLock { $0 } }

    func raise() {
        condition.lock()
        raised.withLock { $0 = true }
        condition.broadcast()
        condition.unlock()
    }

    /// Sleeps for `duration` or until raised; returns whether it was raised.
    func wait(for duration: Duration) -> Bool {
        let deadline = Date(timeIntervalSinceNow: duration / .seconds(1))
        condition.lock()
        defer { condition.unlock() }
        while !isRaised {
            if !condition.wait(until: deadline) { break }
        }
        return isRaised
    }
}
