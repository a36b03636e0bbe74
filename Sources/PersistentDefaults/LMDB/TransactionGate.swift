import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Keeps LMDB transactions and map changes of one environment apart.
///
/// lmdb.h on `mdb_env_set_mapsize`: "This function may only be called if no transactions are
/// active in this process. Note that the library does not check for this condition, the caller
/// must ensure it explicitly." Every transaction, and the background flush, holds the gate
/// shared; growing the map, adopting another process's map size and closing hold it exclusive.
///
/// The gate also remembers, per thread, how deep the thread is in shared sections and whether it
/// is inside a write transaction, so that a nested write is refused instead of deadlocking on
/// LMDB's writer mutex, and a thread never waits for the exclusive side while it holds the
/// shared side itself.
///
/// The shared side has two forms. Single reads through a thread's own ``ReaderSlot`` (the hot
/// path) take no shared lock at all: the slot's busy state is the thread's hold, on a cache line
/// no other thread writes, so reads on several cores do not contend (a `pthread_rwlock` makes
/// every read do two atomic read-modify-writes on one shared line). Everything else — scopes
/// that run the caller's code, writes, maintenance, threads without a slot — takes the rwlock
/// shared.
///
/// The exclusive side is rare (close, growing or adopting the map, reopening): it closes a
/// turnstile, raises `exclusive`, takes the rwlock exclusively (so rwlock holders drain), then
/// waits until no slot is busy (``ReaderSlots/waitUntilNoneBusy()``). A slot reader marks its
/// slot busy and then reads `exclusive`; the exclusive side raises `exclusive` and then reads the
/// slots: both sequentially consistent, so at least one of them sees the other (the reader backs
/// off and waits at the turnstile, or the exclusive side waits for the slot).
///
/// The rwlock prefers readers (nested reads need that), so a steady stream of reads on other
/// threads could keep the exclusive side waiting for ever: a write that must grow the map would
/// never run. The turnstile, held for the whole exclusive section, stops that: a thread that
/// holds no shared section waits at it (only while `exclusive` is raised) before it takes the
/// shared side, so the readers inside drain and the exclusive side gets in. Threads that
/// already hold the shared side pass, as they must to finish.
final class TransactionGate: @unchecked Sendable {
    // @unchecked Sendable: the rwlock and the turnstile mutex are the synchronisation itself,
    // `exclusive` is atomic, `slots` is Sendable, and the thread-local key is only read and
    // written for the calling thread.
    private let lock: UnsafeMutablePointer<pthread_rwlock_t>
    private let turnstile: UnsafeMutablePointer<pthread_mutex_t>
    /// Raised from before `withExclusive` takes the rwlock until its body has ended, with the
    /// turnstile held.
    private let exclusive = Atomic<Bool>(false)
    /// The per-thread slots whose busy state is the shared side of slot reads.
    private let slots: ReaderSlots
    /// A `let`: a stored `var` of a class costs a dynamic exclusivity check on every read.
    private let threadState: pthread_key_t
    /// The calling thread's innermost read transaction that runs the caller's code (`read { }`):
    /// see ``withEnclosingRead(_:_:)``.
    private let enclosingReadKey: pthread_key_t

    /// Throws when the thread-local keys cannot be made: past `PTHREAD_KEYS_MAX` (1,024 on
    /// Linux) keys in the process, about 500 stores open at once. A failed key must not be used:
    /// its variable would still hold another key, and two states would share it.
    init(slots: ReaderSlots) throws(PersistentDefaultsError) {
        var keys: [pthread_key_t] = []
        for _ in 0..<2 {
            var key: pthread_key_t = 0
            let code = pthread_key_create(&key, nil)
            guard code == 0 else {
                for made in keys { pthread_key_delete(made) }
                throw .lmdb(code: LMDBResultCode(rawValue: code), operation: "pthread_key_create")
            }
            keys.append(key)
        }
        (threadState, enclosingReadKey) = (keys[0], keys[1])
        self.slots = slots
        lock = .allocate(capacity: 1)
        // The default (reader-preferring) kind: a thread may take the shared side again while it
        // holds it, which nested reads need.
        _ = pthread_rwlock_init(lock, nil)  // Only fails for lack of memory.
        turnstile = .allocate(capacity: 1)
        _ = pthread_mutex_init(turnstile, nil)  // Cannot fail with default attributes on Linux.
    }

    deinit {
        pthread_key_delete(threadState)
        pthread_key_delete(enclosingReadKey)
        pthread_rwlock_destroy(lock)
        lock.deallocate()
        pthread_mutex_destroy(turnstile)
        turnstile.deallocate()
    }

    /// Takes the shared side; waits at the turnstile first while an exclusive section waits,
    /// unless this thread already holds the shared side.
    @inline(__always)
    private func lockShared() {
        if exclusive.load(ordering: .relaxed), state >> 1 == 0 {
            pthread_mutex_lock(turnstile)
            pthread_mutex_unlock(turnstile)
        }
        pthread_rwlock_rdlock(lock)
    }

    private var state: Int {
        get { Int(bitPattern: pthread_getspecific(threadState)) }
        set { _ = pthread_setspecific(threadState, UnsafeRawPointer(bitPattern: newValue)) }
    }

    /// Whether the calling thread holds the shared side.
    var isHeldByCurrentThread: Bool { state >> 1 > 0 }

    /// How many marked shared sections of any environment's gate the calling thread is in: the
    /// error reporter holds back every store's handler while the thread is inside any store's
    /// write transaction or read scope (see `ErrorReporter`).
    private static let heldAnywhereKey: pthread_key_t = {
        var key: pthread_key_t = 0
        // Fails only past PTHREAD_KEYS_MAX keys; the library makes this one key per process.
        _ = pthread_key_create(&key, nil)
        return key
    }()

    private static var heldAnywhere: Int {
        get { Int(bitPattern: pthread_getspecific(heldAnywhereKey)) }
        set { _ = pthread_setspecific(heldAnywhereKey, UnsafeRawPointer(bitPattern: newValue)) }
    }

    /// Whether the calling thread holds the shared side of any environment's gate, marked: it
    /// is inside a write transaction, a read scope or a library section of some store.
    static var isAnyHeldByCurrentThread: Bool { heldAnywhere > 0 }

    /// Runs `body`, the caller's code inside the read transaction `handle` on this thread, with
    /// `handle` as the thread's enclosing read: a read nested in it that cannot adopt another
    /// process's larger map (that waits for this very read to end) is answered from it.
    func withEnclosingRead<R>(_ handle: TransactionHandle, _ body: () throws -> R) rethrows -> R {
        let previous = pthread_getspecific(enclosingReadKey)
        _ = pthread_setspecific(enclosingReadKey, UnsafeRawPointer(handle))  // Fails only for lack of memory.
        defer { _ = pthread_setspecific(enclosingReadKey, previous) }
        return try body()
    }

    /// The calling thread's innermost enclosing read (see ``withEnclosingRead(_:_:)``), if any.
    var enclosingRead: TransactionHandle? { pthread_getspecific(enclosingReadKey).map { OpaquePointer($0) } }

    /// Whether the calling thread is inside a write transaction.
    var isWritingOnCurrentThread: Bool { state & 1 == 1 }

    /// Runs `body` with the shared side held, marking the thread as holding it.
    @inline(__always)
    func withShared<R>(_ body: () throws -> R) rethrows -> R {
        lockShared()
        state += 2
        Self.heldAnywhere += 1
        defer {
            Self.heldAnywhere -= 1
            state -= 2
            pthread_rwlock_unlock(lock)
        }
        return try body()
    }

    /// Runs `body` with the shared side held, without marking the thread: for short sections
    /// that run no code which could start a transaction (a single read and its decoding). Saves
    /// the two thread-local updates, about 10 ns.
    @inline(__always)
    func withSharedUnmarked<R>(_ body: () throws -> R) rethrows -> R {
        lockShared()
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }

    /// Runs `body` with the shared side held and the thread marked as writing.
    func withSharedWriting<R>(_ body: () throws -> R) rethrows -> R {
        try withShared {
            state |= 1
            defer { state &= ~1 }
            return try body()
        }
    }

    /// Runs `body` with the shared side held if it can be taken within `timeout` seconds;
    /// returns nil without running `body` otherwise. For the exit-time flush, which must not
    /// wait forever for a thread that holds the exclusive side while the process exits.
    func withShared<R>(timeout: Double, _ body: () throws -> R) rethrows -> R? {
        var now = timespec()
        _ = clock_gettime(CLOCK_REALTIME, &now)  // CLOCK_REALTIME cannot fail.
        let nanoseconds = Int(now.tv_nsec) + Int(timeout * 1e9)
        var deadline = timespec(
            tv_sec: now.tv_sec + nanoseconds / 1_000_000_000, tv_nsec: nanoseconds % 1_000_000_000)
        guard pthread_rwlock_timedrdlock(lock, &deadline) == 0 else { return nil }
        state += 2
        Self.heldAnywhere += 1
        defer {
            Self.heldAnywhere -= 1
            state -= 2
            pthread_rwlock_unlock(lock)
        }
        return try body()
    }

    /// Whether an exclusive section is waiting or running; a slot reader reads it after marking
    /// its slot busy (sequentially consistent, see the type's comment).
    @inline(__always)
    var isExclusiveRaised: Bool { exclusive.load(ordering: .sequentiallyConsistent) }

    /// Waits until the exclusive section that raised `exclusive` has ended. Call holding no
    /// shared side (a slot reader first gives its slot back).
    func waitForExclusive() {
        pthread_mutex_lock(turnstile)
        pthread_mutex_unlock(turnstile)
    }

    /// Runs `body` with the exclusive side held: no rwlock holder and no busy slot. The caller
    /// must not hold the shared side.
    func withExclusive<R>(_ body: () throws -> R) rethrows -> R {
        pthread_mutex_lock(turnstile)
        exclusive.store(true, ordering: .sequentiallyConsistent)
        pthread_rwlock_wrlock(lock)
        slots.waitUntilNoneBusy()
        defer {
            exclusive.store(false, ordering: .releasing)
            pthread_rwlock_unlock(lock)
            pthread_mutex_unlock(turnstile)
        }
        return try body()
    }
}
