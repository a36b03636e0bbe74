import CLMDB
import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Reset read transactions kept per thread, so that a read renews the calling thread's own
/// transaction (`mdb_txn_renew` / `mdb_txn_reset`) without a lock shared with other threads.
///
/// lmdb.h on `MDB_NOTLS`: "A thread may use parallel read-only transactions. A read-only
/// transaction may span threads if the user synchronizes its use." Each thread gets one slot
/// per environment; a slot holds a transaction only while it is reset, so it keeps a reader slot
/// in `lock.mdb` but **no snapshot**: LMDB reuses pages freely, whatever the thread does next.
///
/// Bounds and release:
/// - At most `limit` threads keep a transaction (a quarter of the reader table, at most 32; the
///   table has the lock file's size, which the `maxReaders` of the process that created the file
///   set), so other processes find free reader slots; further threads begin and abort one per read.
/// - A thread's transactions are aborted when the thread exits (a `pthread` key destructor).
/// - When a read finds the reader table full, idle slots of other threads are emptied
///   (`reclaimIdle`) and the read is tried again.
/// - A slot nobody read through for one to two ``reapInterval``s is emptied by a timer that runs
///   only while some slot holds a transaction (`reap`): a table that idle threads of other
///   processes filled frees itself, and their next reads begin transactions again. Before it,
///   four processes whose threads had read once and then sat idle (a thread pool, a thread per
///   connection) filled a table of 8 for as long as they lived, and every read of every other
///   process failed (`idleReadersOfOtherProcessesLeaveSlotsForNewReaders`).
/// - Closing the environment, adopting another map size and reopening after a failed map change
///   (all under the exclusive gate, so no read of this environment is running) empty every slot.
///
/// `@unchecked Sendable`: `slots` and `isClosed` change only under `lock`; each slot's state
/// is an `Atomic` (see ``ReaderSlot``).
final class ReaderSlots: @unchecked Sendable {
    private let lock = Locked<State>(State())
    /// Set under `lock` when the environment closes; read without it to drop stale cache entries.
    let isClosed = Atomic<Bool>(false)
    /// How many slots exist, changed under `lock`; read without it so that threads past the
    /// limit do not take the lock on every read.
    private let count = Atomic<Int>(0)
    let limit: Int
    /// Whether a `reap` is scheduled; set by the first transaction a slot begins while none is.
    private let reaperArmed = Atomic<Bool>(false)
    /// Whether the reaper is armed (for tests).
    var isReaperArmed: Bool { reaperArmed.load(ordering: .sequentiallyConsistent) }
    /// How many slots the reaper emptied (for tests).
    let reapedSlots = Atomic<Int>(0)
    /// How often the timer looks at the slots while one holds a transaction: it marks idle slots
    /// aged, and empties those still aged at its next look.
    static let reapInterval: DispatchTimeInterval = .seconds(1)

    private struct State: @unchecked Sendable {
        // @unchecked Sendable: the slots are only touched under the lock or by their own thread.
        var slots: [ObjectIdentifier: Unmanaged<ReaderSlot>] = [:]
    }

    init(maxReaders: Int) {
        limit = min(max(maxReaders / 4, 1), 32)
    }

    /// The calling thread's slot of this environment, made on first use; nil once `limit`
    /// threads hold one (the caller then uses a transaction of its own).
    @inline(__always)
    func slotOfCurrentThread() -> ReaderSlot? {
        unretainedSlotOfCurrentThread()?.takeUnretainedValue()
    }

    /// ``slotOfCurrentThread()``, not retained: the thread's cache (kept by its `pthread` key)
    /// holds the slot, and only this thread takes it out of there, which no read does while it
    /// uses its slot (a read nested in it on this thread may move the slot within the cache,
    /// which still holds it; the environment cannot close while the slot is busy). Calling the
    /// slot through `_withUnsafeGuaranteedRef`, a read retains and releases the slot once (the
    /// compiler keeps that one) and the cache not at all, against three times before (callgrind:
    /// 2,373 → 2,279 instructions a scattered read).
    @inline(__always)
    func unretainedSlotOfCurrentThread() -> Unmanaged<ReaderSlot>? {
        ThreadReaderCache.current()._withUnsafeGuaranteedRef { cache in
            if let first = cache.first, first.owner === self { return Unmanaged.passUnretained(first) }
            return cache.slot(of: self).map { Unmanaged.passUnretained($0) }
        }
    }

    /// Registers a new slot of the calling thread; nil when `limit` slots exist.
    fileprivate func makeSlot() -> ReaderSlot? {
        guard count.load(ordering: .relaxed) < limit else { return nil }
        return lock.withLock { state in
            guard !isClosed.load(ordering: .relaxed), state.slots.count < limit else { return nil }
            let slot = ReaderSlot(owner: self)
            state.slots[ObjectIdentifier(slot)] = Unmanaged.passUnretained(slot)
            count.store(state.slots.count, ordering: .relaxed)
            return slot
        }
    }

    /// Removes a slot whose thread drops it (thread exit, or an entry of a closed environment),
    /// aborting its transaction while the environment is open.
    fileprivate func retire(_ slot: ReaderSlot) {
        lock.withLock { state in
            guard state.slots.removeValue(forKey: ObjectIdentifier(slot)) != nil else { return }
            count.store(state.slots.count, ordering: .relaxed)
            // Not closed: close empties every listed slot under this lock before it closes the
            // environment, so the transaction belongs to an open environment.
            slot.empty()
        }
    }

    /// Empties the idle slots of every thread (aborting their reset transactions, which frees
    /// their reader slots); for a read that found the reader table full. Call with the gate held.
    /// Returns how many were emptied.
    @discardableResult
    func reclaimIdle() -> Int {
        lock.withLock { state in
            var emptied = 0
            for slot in state.slots.values where slot.takeUnretainedValue().empty() { emptied += 1 }
            return emptied
        }
    }

    /// Arms the timer that empties slots nobody reads through, unless it is armed; called when a
    /// slot begins a transaction, which it keeps afterwards. Sequentially consistent against
    /// `reap`'s disarm-then-look: either this sees the timer disarmed or `reap` sees the slot.
    func armReaper() {
        guard !reaperArmed.load(ordering: .sequentiallyConsistent),
            reaperArmed.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged
        else { return }
        scheduleReap()
    }

    private func scheduleReap() {
        DispatchQueue.global(qos: .utility).asyncAfter(deadline: .now() + Self.reapInterval) { [weak self] in
            self?.reap()
        }
    }

    /// One look of the timer: empties the slots marked aged at the last look and still unused,
    /// marks the idle ones aged, and looks again an interval later while any slot holds a
    /// transaction. Under the lock, as `reclaimIdle`: close empties every slot under it first.
    private func reap() {
        let holding = lock.withLock { state -> Bool in
            guard !isClosed.load(ordering: .relaxed) else { return false }
            var holding = false
            for entry in state.slots.values {
                let slot = entry.takeUnretainedValue()
                if slot.emptyIfAged() {
                    reapedSlots.add(1, ordering: .relaxed)
                    continue
                }
                if slot.age() || slot.state.load(ordering: .sequentiallyConsistent) != ReaderSlot.empty {
                    holding = true
                }
            }
            return holding
        }
        if holding { return scheduleReap() }
        reaperArmed.store(false, ordering: .sequentiallyConsistent)
        // A slot that began a transaction after the look above saw the timer still armed.
        let began = lock.withLock { state in
            !isClosed.load(ordering: .relaxed)
                && state.slots.values.contains {
                    $0.takeUnretainedValue().state.load(ordering: .sequentiallyConsistent) != ReaderSlot.empty
                }
        }
        if began { armReaper() }
    }

    /// Waits until no slot is busy: the exclusive side of ``TransactionGate``, after it raised its
    /// flag, so that no new read enters. Checks under the lock (a slot is freed only after it
    /// left the dictionary under the lock) but never waits holding it: a busy reader may need the
    /// lock (`reclaimIdle`).
    func waitUntilNoneBusy() {
        var rounds = 0
        while lock.withLock({ state in
            state.slots.values.contains {
                $0.takeUnretainedValue().state.load(ordering: .sequentiallyConsistent) == ReaderSlot.busy
            }
        }) {
            // A slot read lasts about a microsecond; yield rather than sleep.
            rounds += 1
            if rounds < 64 { sched_yield() } else { usleep(50) }
        }
    }

    /// Empties every slot; with `closing`, no slot is made or renewed afterwards. Call with the
    /// gate held exclusively: then no slot is in use (``TransactionGate/withExclusive(_:)``
    /// waited for the busy ones).
    func emptyAll(closing: Bool) {
        lock.withLock { state in
            for slot in state.slots.values { slot.takeUnretainedValue().empty() }
            if closing {
                isClosed.store(true, ordering: .releasing)
                state.slots.removeAll()
                count.store(0, ordering: .relaxed)
            }
        }
    }
}

/// One thread's kept read transaction of one environment.
///
/// `state` says who may touch `handle`: the owning thread while `busy`, the thread that moved
/// it out of `idle` or `aged` while `reclaiming`; nobody while `empty` but the owning thread, which
/// acquires that state before it stores a new handle. So `handle` is never touched by two
/// threads without an ordering `state` change between them.
final class ReaderSlot: @unchecked Sendable {
    // @unchecked Sendable: `handle` is guarded by `state` as described above.
    static let empty = 0
    static let idle = 1
    static let busy = 2
    static let reclaiming = 3
    /// Idle, and not read through since the reaper's last look (see ``ReaderSlots/armReaper()``).
    static let aged = 4

    let owner: ReaderSlots
    let state = Atomic<Int>(ReaderSlot.empty)
    /// A reset read transaction while `idle`; nil while `empty`. Unchecked exclusivity: `state`
    /// orders every access (above), and a dynamic check costs more than the rest of the slot's
    /// work on a read.
    @exclusivity(unchecked) var handle: TransactionHandle?

    fileprivate init(owner: ReaderSlots) { self.owner = owner }

    /// How ``enter(_:)`` went.
    enum Entry {
        /// The slot is busy for this read, which holds the gate's shared side through it.
        case entered
        /// An outer read on this thread holds the slot (and with it the gate): the caller reads
        /// with a transaction of its own, protected by the outer read.
        case nested
        /// Another thread is reclaiming the slot: the caller takes the gate's rwlock instead.
        case unavailable
    }

    /// Owner side: takes the slot for one read, as the gate's shared side. Marks the slot busy,
    /// then checks the gate's exclusive flag (both sequentially consistent, against the
    /// exclusive side's flag-then-slots order); while an exclusive section is raised it gives the
    /// slot back and waits for the section to end, unless this thread holds the gate's shared
    /// side already.
    @inline(__always)
    func enter(_ gate: TransactionGate) -> Entry {
        while true {
            var previous = ReaderSlot.idle
            if !state.compareExchange(
                expected: ReaderSlot.idle, desired: ReaderSlot.busy, ordering: .sequentiallyConsistent
            ).exchanged {
                guard let taken = takeUnlessIdle() else {
                    // Only this thread makes the slot busy.
                    return state.load(ordering: .relaxed) == ReaderSlot.busy ? .nested : .unavailable
                }
                previous = taken
            }
            // A thread that holds the gate's shared side (inside `write {}` or `read {}`) must
            // not wait: the exclusive side waits for that very hold in `pthread_rwlock_wrlock`,
            // before it looks at the slots, so this slot's read is safe (waiting here deadlocked a
            // read inside a write with a thread growing the map).
            guard gate.isExclusiveRaised, !gate.isHeldByCurrentThread else { return .entered }
            state.store(previous, ordering: .releasing)
            gate.waitForExclusive()
        }
    }

    /// Owner side: takes the slot for one read inside a section that already holds the gate's
    /// rwlock. Returns false when the slot is in use by an outer read on this thread or being
    /// reclaimed: the caller uses a transaction of its own.
    @inline(__always)
    func acquire() -> Bool {
        if state.compareExchange(
            expected: ReaderSlot.idle, desired: ReaderSlot.busy, ordering: .sequentiallyConsistent
        ).exchanged {
            return true
        }
        return takeUnlessIdle() != nil
    }

    /// Owner side, after the slot was not idle: makes an empty or aged slot busy and returns the
    /// state it had; nil when it is busy (an outer read) or being reclaimed. Sequentially
    /// consistent: a slot that turns busy here begins a transaction and arms the reaper
    /// (`armReaper`), against the reaper's disarm-then-look.
    @inline(never)
    private func takeUnlessIdle() -> Int? {
        if state.compareExchange(
            expected: ReaderSlot.empty, desired: ReaderSlot.busy, ordering: .sequentiallyConsistent
        )
        .exchanged {
            return ReaderSlot.empty
        }
        if state.compareExchange(expected: ReaderSlot.aged, desired: ReaderSlot.busy, ordering: .sequentiallyConsistent)
            .exchanged
        {
            return ReaderSlot.aged
        }
        return nil
    }

    /// Owner side: gives the slot back after `mdb_txn_reset` (or empty after an abort).
    @inline(__always)
    func release(keeping transaction: TransactionHandle?) {
        handle = transaction
        state.store(transaction == nil ? ReaderSlot.empty : ReaderSlot.idle, ordering: .releasing)
    }

    /// Any side, with the environment open: aborts the idle (or aged) transaction; true if there
    /// was one.
    @discardableResult
    fileprivate func empty() -> Bool {
        emptyIfAged() || empty(from: ReaderSlot.idle)
    }

    /// The reaper's side, with the environment open: aborts the transaction of a slot that stayed
    /// aged since the reaper's last look; true if it did.
    fileprivate func emptyIfAged() -> Bool { empty(from: ReaderSlot.aged) }

    /// The reaper's side: marks an idle slot aged (its next read takes it back); true if it did.
    fileprivate func age() -> Bool {
        state.compareExchange(expected: ReaderSlot.idle, desired: ReaderSlot.aged, ordering: .sequentiallyConsistent)
            .exchanged
    }

    private func empty(from expected: Int) -> Bool {
        guard
            state.compareExchange(
                expected: expected, desired: ReaderSlot.reclaiming, ordering: .acquiringAndReleasing
            ).exchanged
        else { return false }
        if let handle { mdb_txn_abort(handle) }
        handle = nil
        state.store(ReaderSlot.empty, ordering: .releasing)
        return true
    }
}

/// The calling thread's slots, one per environment it read, in a `pthread` key whose destructor
/// retires them when the thread exits.
final class ThreadReaderCache {
    /// The slot of the environment read last (the common case: one store per process).
    /// Unchecked exclusivity: only the owning thread touches the cache.
    @exclusivity(unchecked) fileprivate var first: ReaderSlot?
    private var others: [ReaderSlot] = []

    private static let key: pthread_key_t = {
        var key: pthread_key_t = 0
        // Fails only past PTHREAD_KEYS_MAX keys; the library makes this one key per process.
        _ = pthread_key_create(&key) { pointer in
            guard let pointer else { return }
            Unmanaged<ThreadReaderCache>.fromOpaque(pointer).takeRetainedValue().retireAll()
        }
        return key
    }()

    /// The calling thread's cache, made on first use; its `pthread` key holds it (retained)
    /// until the thread exits.
    @inline(__always)
    fileprivate static func current() -> Unmanaged<ThreadReaderCache> {
        if let pointer = pthread_getspecific(key) { return Unmanaged<ThreadReaderCache>.fromOpaque(pointer) }
        return make()
    }

    @inline(never)
    private static func make() -> Unmanaged<ThreadReaderCache> {
        let cache = Unmanaged.passRetained(ThreadReaderCache())
        _ = pthread_setspecific(key, cache.toOpaque())  // Fails only for lack of memory.
        return cache
    }

    /// The slot of `slots` (made when missing and allowed); moves it first.
    fileprivate func slot(of slots: ReaderSlots) -> ReaderSlot? {
        dropClosed()
        if let index = others.firstIndex(where: { $0.owner === slots }) {
            let found = others.remove(at: index)
            if let first { others.append(first) }
            first = found
            return found
        }
        guard let made = slots.makeSlot() else { return nil }
        if let first { others.append(first) }
        first = made
        return made
    }

    /// Forgets the slots of closed environments.
    private func dropClosed() {
        if let slot = first, slot.owner.isClosed.load(ordering: .acquiring) {
            slot.owner.retire(slot)
            first = nil
        }
        others.removeAll { slot in
            guard slot.owner.isClosed.load(ordering: .acquiring) else { return false }
            slot.owner.retire(slot)
            return true
        }
    }

    /// Thread exit: aborts the kept transactions of open environments.
    private func retireAll() {
        if let first { first.owner.retire(first) }
        for slot in others { slot.owner.retire(slot) }
        first = nil
        others.removeAll()
    }
}
