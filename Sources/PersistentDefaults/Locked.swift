#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A value that one thread at a time may use, guarded by a `pthread` mutex.
///
/// Used instead of `Synchronization.Mutex` wherever the library's own locking decides
/// correctness (observer registration and delivery, the store registry, tokens): the toolchain's
/// `Synchronization` module is prebuilt without ThreadSanitizer instrumentation, so TSan cannot
/// see a `Mutex` and reports every access made under one as a race (`tools/tsan-mutex-probe`),
/// whereas it intercepts `pthread_mutex_lock`. The cost is a few nanoseconds per section more
/// than `Mutex`, on paths that run per registration or per commit, and per read only of a key
/// whose decoding is user code (`Key.lastKnown`), where it saves the decoding.
///
/// `@unchecked Sendable`: `value` is read and written only inside `withLock`, between
/// `pthread_mutex_lock` and `pthread_mutex_unlock`; `Value` is `Sendable`.
final class Locked<Value: Sendable>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    // `@exclusivity(unchecked)`: the mutex already makes every access exclusive (a `body` that
    // called `withLock` on the same value again would block on the mutex before it could
    // overlap), so the runtime's dynamic check — `swift_beginAccess`, ~160 instructions with its
    // thread-local lookup (callgrind) — proves nothing more.
    @exclusivity(unchecked) private var value: Value

    init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        _ = pthread_mutex_init(mutex, nil)  // Cannot fail with default attributes on Linux.
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the value, holding the lock; `body` must not run user code.
    @inline(__always)
    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
