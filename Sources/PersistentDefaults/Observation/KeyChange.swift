import Synchronization

/// A committed change of one key, passed to ``PersistentDefaults/observe(_:queue:_:)-(Key<Value>,_,_)``.
public struct KeyChange<Value: Sendable>: Sendable {
    /// The key's name.
    public let key: String
    /// The value before the commit (the default when it was not stored).
    public let oldValue: Value
    /// The value after the commit (the default when it was removed).
    public let newValue: Value
    /// The commit's sequence number in the commit log. A change made by a client that bypasses
    /// the log (a plain LMDB writer) carries the newest logged sequence at the time it was seen.
    public let sequence: UInt64
}

/// Keeps an observation alive: call ``cancel()`` or release the token to stop it.
///
/// ```swift
/// let token = store.observe(.launchCount) { change in print(change.newValue) }
/// token.cancel()
/// ```
public final class ObservationToken: Sendable {
    private let cancellation = Locked<(@Sendable () -> Void)?>(nil)

    init(_ cancel: @escaping @Sendable () -> Void) {
        cancellation.withLock { $0 = cancel }
    }

    /// Stops the observation; never waits for a callback, so a callback that waits for the
    /// calling thread cannot deadlock with it. A callback that another thread is already
    /// delivering may still run once; none is started for a commit delivered after this
    /// returns. Calling it again does nothing.
    public func cancel() {
        let cancel = cancellation.withLock { action in
            defer { action = nil }
            return action
        }
        cancel?()
    }

    deinit { cancel() }
}
