import Foundation

/// A value guarded by an `NSLock`: unlike `Synchronization.Mutex`, visible to ThreadSanitizer,
/// so that a TSan run of the tests reports only real races.
public final class Guarded<Value: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `value` is touched only between `lock()` and `unlock()`.
    private let lock = NSLock()
    private var value: Value

    /// Guards `value`.
    public init(_ value: Value) { self.value = value }

    /// Runs `body` with the value, under the lock.
    public func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
