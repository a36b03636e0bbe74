import Dispatch
import Synchronization

/// The observers of one store in this process, and the delivery of committed changes to them.
///
/// Delivery follows the commit log: records are delivered once each, in sequence order, whether
/// this process or another one committed them. The thread that commits delivers (after the
/// commit, with no lock held and no write transaction open); if another thread is already
/// delivering, that thread delivers the new record too, right after the ones before it, so
/// order holds. Callbacks may read and write the store; their commits are delivered after the
/// current record.
///
/// Registration and delivery agree on one sequence number: a new observer starts from a
/// snapshot that no delivery has passed yet (``State/dispatched``), so it gets every commit
/// after its snapshot and none before. Each key observer keeps its own last-seen bytes and
/// sequence, so observers of one key registered at different moments each see exactly the
/// changes after their own start.
///
/// When records are missing (pruned before this process read them, or damaged), or a client
/// that bypasses the log wrote, the observed keys are compared with the store in the same
/// snapshot, after every record before it was delivered, so logged changes keep their order.
final class ObserverRegistry: Sendable {
    /// Whether an observer may still be called; shared by the registry and the token.
    final class Activity: Sendable {
        let isActive = Atomic<Bool>(true)
    }

    /// What a key observer knows of its key.
    private enum Baseline {
        /// The key's stored bytes (nil: not stored) as of the observer's position.
        case known([UInt8]?)
        /// The first read failed; the next comparison sets the baseline without a callback.
        case unknown
    }

    private struct KeyObserver {
        var baseline: Baseline
        /// The sequence the baseline is as of; only later records are delivered.
        var position: UInt64
        /// The LMDB transaction ID of the snapshot the observer started from (0 without a start):
        /// a comparison made in an older snapshot is not for it (see `compare`).
        let startTransaction: Int
        /// Registered inside `read { }` at a snapshot that delivery had passed (see `register`):
        /// left out of delivery until the records after its position are read again for it, so
        /// that the rest of a batch already under way does not skip the ones before.
        var awaitsReplay = false
        let activity: Activity
        let handler: @Sendable (_ old: [UInt8]?, _ new: [UInt8]?, _ sequence: UInt64) -> Void
    }

    private struct CommitObserver {
        /// Only records after this sequence are delivered; `.max` until the next comparison when
        /// the observer's start could not be read (see `compare`).
        var position: UInt64
        let activity: Activity
        let handler: @Sendable (CommitRecord) -> Void
        /// Called, in place of the records, when records after `position` are skipped: pruned
        /// before this process read them, or damaged (see `skip`). Nil: they are skipped silently.
        var missed: (@Sendable () -> Void)? = nil
    }

    private struct State {
        /// Observers by the key name's UTF-8 bytes (a name is its bytes; see `Key`).
        var keys: [[UInt8]: [UInt64: KeyObserver]] = [:]
        var commitObservers: [UInt64: CommitObserver] = [:]
        /// Prefix observers by the prefix's UTF-8 bytes.
        var prefixes: [[UInt8]: [UInt64: CommitObserver]] = [:]
        /// How many observed prefixes have each length: a change's name is looked up once per
        /// distinct length, not once per observer.
        var prefixLengths: [Int: Int] = [:]
        var nextID: UInt64 = 0
        /// Every record up to this sequence has been delivered.
        var delivered: UInt64 = 0
        /// The highest sequence whose delivery (or comparison) has begun; a new observer must
        /// start from a snapshot at or after it.
        var dispatched: UInt64 = 0
        /// Records up to this sequence are known to exist.
        var target: UInt64 = 0
        var isDelivering = false
        /// Observed keys must be compared with the store (records missing, or an unlogged write).
        var needsComparing = false
        /// Records after this sequence must be read again for key observers that start before
        /// `dispatched` (see `register`); the others have them already.
        var replayFrom: UInt64?
        /// The names of the key observers that await the replay (`KeyObserver.awaitsReplay`).
        var replayNames: Set<[UInt8]> = []
        var watcher: ExternalWatcher?
        var isClosed = false
        /// What to run when the store closes (see `onClose`), by ID.
        var closeActions: [UInt64: @Sendable () -> Void] = [:]
        var isEmpty: Bool { keys.isEmpty && commitObservers.isEmpty && prefixes.isEmpty }
        /// Whether a delivery has something to do.
        var hasWork: Bool { delivered < target || needsComparing || replayFrom != nil }
        /// How many observers are registered, kept as they come and go.
        var observerCount = 0
        /// For each wake-up bit, how many observed key names have it: a removal finds the bits
        /// still observed in 64 steps, not in a walk over every observed name (which made
        /// cancelling one of 10,000 observers cost 229 µs).
        var keyBitCounts = [Int](repeating: 0, count: 64)
        /// The wake-up bits of the observed key names: the bits whose count is not zero.
        private(set) var keyBits: UInt64 = 0
        /// How many observed key names have each name hash (`WakeChannel.nameHash`): tells a
        /// commit of unobserved names from one that needs delivering without building the names.
        private var keyNameHashes: [UInt64: Int] = [:]
        /// The same for the observed prefixes (hashed as names).
        private var prefixHashes: [UInt64: Int] = [:]

        /// Adds a prefix observer, counting the prefix's length and hash when it is newly observed.
        mutating func insert(_ observer: CommitObserver, id: UInt64, prefix: [UInt8]) {
            if prefixes[prefix] == nil {
                prefixLengths.countUp(prefix.count)
                prefixHashes.countUp(WakeChannel.nameHash(prefix))
            }
            prefixes[prefix, default: [:]][id] = observer
        }

        /// Removes a prefix observer; returns it, nil when it was not there.
        mutating func removePrefixObserver(id: UInt64, prefix: [UInt8]) -> CommitObserver? {
            guard let removed = prefixes[prefix]?.removeValue(forKey: id) else { return nil }
            guard prefixes[prefix]?.isEmpty == true else { return removed }
            prefixes[prefix] = nil
            prefixLengths.countDown(prefix.count)
            prefixHashes.countDown(WakeChannel.nameHash(prefix))
            return removed
        }

        /// The wake-up bits of what is observed (see `WakeChannel`).
        var wakeBits: UInt64 { keyBits | (commitObservers.isEmpty && prefixes.isEmpty ? 0 : WakeChannel.everyCommit) }

        /// Adds a key observer, counting the name's wake-up bit and hash when the name is newly
        /// observed.
        mutating func insert(_ observer: KeyObserver, id: UInt64, name: [UInt8], bit: UInt64) {
            if keys[name] == nil {
                keyBitCounts[bit.trailingZeroBitCount] += 1
                keyBits |= bit
                keyNameHashes.countUp(WakeChannel.nameHash(name))
            }
            keys[name, default: [:]][id] = observer
        }

        /// Removes a key observer; returns it, nil when it was not there.
        mutating func removeKeyObserver(id: UInt64, name: [UInt8], bit: UInt64) -> KeyObserver? {
            guard let removed = keys[name]?.removeValue(forKey: id) else { return nil }
            if keys[name]?.isEmpty == true {
                keys[name] = nil
                keyBitCounts[bit.trailingZeroBitCount] -= 1
                if keyBitCounts[bit.trailingZeroBitCount] == 0 { keyBits &= ~bit }
                keyNameHashes.countDown(WakeChannel.nameHash(name))
            }
            return removed
        }

        /// See ``ObserverRegistry/rewind(to:)``.
        mutating func rewind(to sequence: UInt64) {
            guard dispatched > sequence || target > sequence || delivered > sequence else { return }
            delivered = min(delivered, sequence)
            dispatched = min(dispatched, sequence)
            target = min(target, sequence)
            replayFrom = replayFrom.map { min($0, sequence) }
            needsComparing = true
            for name in Array(keys.keys) {
                for (id, observer) in keys[name] ?? [:] where observer.position > sequence {
                    keys[name]?[id]?.position = sequence
                }
            }
            for (id, observer) in commitObservers where observer.position != .max && observer.position > sequence {
                commitObservers[id]?.position = sequence
            }
            for prefix in Array(prefixes.keys) {
                for (id, observer) in prefixes[prefix] ?? [:]
                where observer.position != .max && observer.position > sequence {
                    prefixes[prefix]?[id]?.position = sequence
                }
            }
        }

        /// Passes the next record in place of delivering it, when that would change nothing but
        /// the counters: no delivery is running or pending, nothing must be compared, no commit
        /// observer exists, and no changed name's hash is an observed name's, nor the hash of one
        /// of its prefixes an observed prefix's (a hash shared by another name only means the
        /// full delivery runs). Returns whether it passed it.
        mutating func passUnobserved(_ record: CommitRecord) -> Bool {
            let sequence = record.sequence
            guard !isDelivering, !needsComparing, replayFrom == nil, delivered &+ 1 == sequence, target <= sequence,
                commitObservers.isEmpty
            else { return false }
            // With no key or prefix observer no name can match: the names are not even read.
            if keyBits != 0 || !prefixLengths.isEmpty {
                var observed = false
                record.forEachChangedName { name in
                    let hash = WakeChannel.nameHash(name)
                    if keyBits & WakeChannel.bit(ofNameHash: hash) != 0, keyNameHashes[hash] != nil { observed = true }
                    for length in prefixLengths.keys where !observed && length <= name.count {
                        if prefixHashes[WakeChannel.nameHash(name.prefix(length))] != nil { observed = true }
                    }
                    return !observed
                }
                if observed { return false }
            }
            (delivered, target) = (sequence, sequence)
            dispatched = max(dispatched, sequence)
            return true
        }
    }

    private let state = Locked(State())
    /// Observers registered plus registrations in progress, read on every commit without the
    /// lock: it is raised before a registration's snapshot and lowered only by a removal, so a
    /// removal racing with a registration can never hide a commit from the new observer.
    private let interest = Atomic<Int>(0)
    /// Records that other processes committed and that delivery passed without reading them
    /// (see ``pass(through:core:)``); for tests and diagnostics.
    let passedRecords = Atomic<Int>(0)
    /// How many times delivery read the log; for tests and diagnostics.
    let logReads = Atomic<Int>(0)

    // MARK: Registration

    /// Adds an observer of the key whose name has `name`'s bytes. `registered` gets the key's
    /// stored bytes at the observer's start (nil when not stored or unreadable), under the
    /// registry lock, before any delivery can reach the new observer: it must not block.
    /// `activity` is the token's: a caller that defers callbacks (`queue:`) checks it again.
    func addKeyObserver(
        name: [UInt8], core: StoreCore, activity: Activity = Activity(),
        handler: @escaping @Sendable ([UInt8]?, [UInt8]?, UInt64) -> Void,
        registered: ([UInt8]?) -> Void = { _ in }
    ) -> ObservationToken {
        let bit = WakeChannel.bit(forKeyNamed: name)
        let id = register(core: core, readingKey: name, wakingOn: bit) {
            state, id, start in
            let baseline: Baseline = start.map { .known($0.bytes) } ?? .unknown
            let position = start?.sequence ?? state.dispatched
            // Behind delivery only from an enclosing `read { }` snapshot (see `register`): the
            // records since are read again for it.
            let awaitsReplay = position < state.dispatched
            if awaitsReplay {
                state.replayNames.insert(name)
                state.replayFrom = min(state.replayFrom ?? .max, position)
            }
            state.insert(
                KeyObserver(
                    baseline: baseline, position: position, startTransaction: start?.transactionID ?? 0,
                    awaitsReplay: awaitsReplay, activity: activity, handler: handler),
                id: id, name: name, bit: bit)
            registered(start?.bytes)
        }
        return ObservationToken { [weak self] in
            activity.isActive.store(false, ordering: .releasing)
            self?.remove { $0.removeKeyObserver(id: id, name: name, bit: bit) }
        }
    }

    /// Adds an observer of whole commit records, starting after the newest commit.
    func addCommitObserver(
        core: StoreCore, activity: Activity = Activity(), handler: @escaping @Sendable (CommitRecord) -> Void
    ) -> ObservationToken {
        let id = register(core: core, readingKey: nil, wakingOn: WakeChannel.everyCommit) { state, id, start in
            state.commitObservers[id] = CommitObserver(
                position: start?.sequence ?? .max, activity: activity, handler: handler)
        }
        return ObservationToken { [weak self] in
            activity.isActive.store(false, ordering: .releasing)
            self?.remove { $0.commitObservers.removeValue(forKey: id) }
        }
    }

    /// Adds an observer of the changes to keys whose names start with `prefix` (UTF-8 bytes):
    /// one call per commit that changed at least one of them, with a record holding only those.
    /// `missed` is called where records it would have been given are skipped (pruned before
    /// this process read them, or damaged), before the records after them.
    func addPrefixObserver(
        prefix: [UInt8], core: StoreCore, activity: Activity = Activity(),
        handler: @escaping @Sendable (CommitRecord) -> Void, missed: (@Sendable () -> Void)? = nil
    ) -> ObservationToken {
        let id = register(core: core, readingKey: nil, wakingOn: WakeChannel.everyCommit) { state, id, start in
            state.insert(
                CommitObserver(
                    position: start?.sequence ?? .max, activity: activity, handler: handler, missed: missed),
                id: id, prefix: prefix)
        }
        return ObservationToken { [weak self] in
            activity.isActive.store(false, ordering: .releasing)
            self?.remove { $0.removePrefixObserver(id: id, prefix: prefix) }
        }
    }

    /// Where a new observer starts: one snapshot's view.
    private struct Start {
        var bytes: [UInt8]?
        var sequence: UInt64
        var transactionID: Int
        /// Read from the snapshot of an enclosing `read { }` (see `Environment.withRead`).
        var isEnclosingSnapshot: Bool
    }

    /// Reads a snapshot and inserts the observer at it, once no delivery has passed it; reads
    /// again otherwise. A failed read is reported and the observer starts at the comparison
    /// with the store that the next delivery makes, a key observer with an unknown baseline that
    /// it sets (it never replays old history).
    ///
    /// Inside `read { }`, after another process grew the map, the read is answered from that
    /// scope's snapshot, which reading again would not move. A key observer then starts at that
    /// snapshot, and the records that delivery has passed since are read again for it, by the
    /// watcher, once the scope has ended and the map is adopted (`replayFrom`): it misses no
    /// change after the value it started from. Commit and prefix observers need no baseline:
    /// they get the records after those already delivered.
    ///
    /// `bits` are the wake-up bits (see `WakeChannel`) that other processes' commits must carry
    /// to wake this process's watcher for the new observer.
    private func register(
        core: StoreCore, readingKey name: [UInt8]?, wakingOn bits: UInt64,
        _ insert: (inout State, UInt64, Start?) -> Void
    ) -> UInt64 {
        // Before the snapshot: a commit the snapshot misses then sees the interest (the
        // sequentially consistent add orders it before the snapshot's reads; `didCommit` fences
        // the other side). The observer's removal lowers it again. Likewise for the wake-up
        // bits, which other processes' writers read after their commits. Both under the
        // waiter's lock, which a removal holds from lowering the interest to storing the mask:
        // between those two steps the bits would be overwritten (an observer whose bit a
        // concurrent cancellation erased missed every other process's commit of its key).
        let waiter = claimedWaiter.withLock { claimed in
            interest.add(1, ordering: .sequentiallyConsistent)
            let waiter = claimed ?? core.environment.wakeChannel?.claimWaiter() ?? WakeChannel.Waiter()
            claimed = waiter
            waiter.add(bits)
            return waiter
        }
        while true {
            let start: Start?
            do {
                start = try core.environment.withRead { transaction in
                    Start(
                        bytes: try name.flatMap { try core.encodedValue(named: $0, in: transaction) },
                        sequence: try core.lastSequence(in: transaction), transactionID: transaction.id,
                        isEnclosingSnapshot: transaction.isEnclosingSnapshot)
                }
            } catch {
                core.reporter.reportOnce(error)
                start = nil
            }
            var replays = false
            var passed = false
            let id = state.withLock { state -> UInt64? in
                // Delivery passed it: read again (an enclosing snapshot would not move).
                if let start, state.dispatched > start.sequence, !start.isEnclosingSnapshot {
                    passed = true
                    return nil
                }
                if state.isEmpty, let start {
                    state.delivered = max(state.delivered, start.sequence)
                    state.dispatched = max(state.dispatched, start.sequence)
                }
                if start == nil { state.needsComparing = true }
                state.nextID += 1
                insert(&state, state.nextID, start)
                replays = state.replayFrom != nil
                state.observerCount += 1
                if state.watcher == nil, !state.isClosed {
                    state.watcher = ExternalWatcher(
                        core: core, waiter: waiter, transactionID: start?.transactionID ?? 0,
                        sequence: start?.sequence ?? 0)
                }
                return state.nextID
            }
            // The watcher delivers the replay: this thread cannot read past its enclosing snapshot.
            if replays { waiter.wake() }
            if let id {
                if let hook = afterRegistration.withLock({ $0 }) { hook() }
                return id
            }
            // Delivery passed the snapshot's log end, yet no commit followed the snapshot (LMDB's
            // meta page, read after delivery's position was, shows its transaction last): the
            // log went back — another client removed its newest records — and reading again
            // would never reach that position.
            if passed, let start, core.environment.info().lastTransactionID == start.transactionID {
                core.reporter.reportOnce(
                    PersistentDefaultsError.corruptLogRecord(
                        sequence: start.sequence,
                        reason: "the log's newest sequence went back to \(start.sequence), before the commits "
                            + "this process delivered (another client removed records)"))
                state.withLock { $0.rewind(to: start.sequence) }
            }
        }
    }

    /// Removes an observer (`body` takes it out of the state and returns it, nil when it was
    /// not there); the last one's removal stops the watcher in the same step, so a concurrent
    /// registration either sees the watcher running or starts a new one.
    ///
    /// The removed observer is released after the lock: its callback is the user's closure, and
    /// what that captured may run the library when it goes — a `@PersistentDefault` that was the
    /// last of its key name cancels the name's tracking observation, an `ObservationToken` its
    /// observer, and both take this lock. Released under it, the cancellation waited for its own
    /// thread for ever (`ObserverReleaseTests`).
    private func remove<Removed>(_ body: (inout State) -> Removed?) {
        let (stopped, removed) = state.withLock { state -> (ExternalWatcher?, Removed?) in
            let removed = body(&state)
            if removed != nil { state.observerCount -= 1 }
            // Still counts the registrations in progress, whose bits must stay; under the
            // waiter's lock, so that none adds its bits between the count and the store.
            claimedWaiter.withLock { waiter in
                let remaining = interest.subtract(1, ordering: .sequentiallyConsistent).newValue
                if remaining == state.observerCount { waiter?.set(state.wakeBits) }
            }
            guard state.isEmpty else { return (nil, removed) }
            defer { state.watcher = nil }
            return (state.watcher, removed)
        }
        stopped?.stop()
        withExtendedLifetime(removed) {}
    }

    /// This process's waiter on the store's wake-up channel (a slot of it, or a private word
    /// when the channel cannot be used or is full), claimed with the first observer and kept
    /// until the store closes.
    /// Its lock also makes a registration's interest and bits, and a removal's recount and
    /// mask, one step each (see `register` and `remove`); taken inside `state`'s lock, never
    /// the other way round.
    private let claimedWaiter = Locked<WakeChannel.Waiter?>(nil)

    private var waiterIfClaimed: WakeChannel.Waiter? { claimedWaiter.withLock { $0 } }

    /// Stops the watcher for good and returns the close actions (`onClose`), for the caller to
    /// run once it holds no lock (an action finishes a stream, whose termination cancels
    /// observers and releases what they hold); the store is closing.
    func close() -> [@Sendable () -> Void] {
        let (stopped, actions) = state.withLock { state in
            state.isClosed = true
            defer {
                state.watcher = nil
                state.closeActions = [:]
            }
            return (state.watcher, Array(state.closeActions.values))
        }
        stopped?.stop()
        // The slot is freed when the watcher's thread lets go of it too.
        claimedWaiter.withLock { $0 = nil }
        return actions
    }

    /// Runs `action` once when the store closes (at once when it is closed already), unless
    /// the returned token is cancelled first: the `updates` streams' `finish()`, so that a
    /// `for await` loop ends instead of waiting for ever on a store that is gone.
    func onClose(_ action: @escaping @Sendable () -> Void) -> ObservationToken {
        let id = state.withLock { state -> UInt64? in
            guard !state.isClosed else { return nil }
            state.nextID += 1
            state.closeActions[state.nextID] = action
            return state.nextID
        }
        guard let id else {
            action()
            return ObservationToken {}
        }
        return ObservationToken { [weak self] in
            self?.state.withLock { _ = $0.closeActions.removeValue(forKey: id) }
        }
    }

    /// Runs on the registering thread once an observer is in place, with no lock held; for
    /// tests that commit at that moment (a delivery can reach the observer before its
    /// registration returns). Nil, its normal state, costs one lock section per registration.
    let afterRegistration = Locked<(@Sendable () -> Void)?>(nil)

    /// Runs on a delivering thread once it has listed the observed keys and before it reads the
    /// store, with no lock held; for tests that register an observer at that moment. Nil, its
    /// normal state, costs one lock section per read of the log.
    let beforeDeliveryRead = Locked<(@Sendable () -> Void)?>(nil)

    /// How many observers are registered; for tests and diagnostics.
    var observerCount: Int { state.withLock { $0.observerCount } }

    /// How many close actions (`onClose`) are registered; for tests and diagnostics.
    var closeActionCount: Int { state.withLock { $0.closeActions.count } }

    /// The names (UTF-8 bytes) of the keys that have observers, and the newest observer ID
    /// given out: every observer with an ID up to it was registered before a snapshot taken now.
    private var observedKeys: (names: [[UInt8]], lastID: UInt64) {
        state.withLock { (Array($0.keys.keys), $0.nextID) }
    }

    // MARK: Delivery

    /// Every record up to this sequence has been delivered (or passed).
    var deliveredSequence: UInt64 { state.withLock { $0.delivered } }

    /// For the watcher, after other processes' commits up to `sequence`: moves delivery past
    /// them without reading the log when the store's wake-up channel shows that each was
    /// announced and none carried a bit of what this process observes — then none changed an
    /// observed key, and no commit or prefix observer exists (their bit is in every commit).
    /// Returns false when that cannot be shown or a delivery is under way: the caller delivers.
    ///
    /// Under the lock, like a delivery's start: a registration whose snapshot is older than the
    /// new position reads again (see `register`), and the waiter's bits, raised before a
    /// registration's snapshot, cover every observer registered or registering.
    func pass(through sequence: UInt64, core: StoreCore) -> Bool {
        guard let channel = core.environment.wakeChannel, let waiter = waiterIfClaimed else { return false }
        return state.withLock { state in
            guard !state.isDelivering, !state.needsComparing, state.replayFrom == nil, state.delivered == state.target
            else { return false }
            guard sequence > state.delivered else { return true }
            guard channel.noneAnnounced(meeting: waiter.bits, after: state.delivered, through: sequence) else {
                return false
            }
            passedRecords.add(Int(sequence - state.delivered), ordering: .relaxed)
            state.delivered = sequence
            state.dispatched = max(state.dispatched, sequence)
            state.target = sequence
            return true
        }
    }

    /// After the log's newest sequence went back to `sequence` (another client removed the
    /// newest records; this library's writers then number their commits from there again):
    /// moves delivery and every observer positioned past it back to it, and asks for a
    /// comparison with the store. Otherwise every commit numbered up to the old end was taken
    /// for one already delivered, and its changes never reached an observer.
    func rewind(to sequence: UInt64) {
        state.withLock { $0.rewind(to: sequence) }
    }

    /// Whether delivery work waits with no thread on it: records to be read again for key
    /// observers that start before them, or from where a thread inside `read { }` left its
    /// delivery, or the work of a delivery whose read failed (see `deliver`), which otherwise
    /// waited for the next commit, if any came.
    var hasWaitingWork: Bool { state.withLock { $0.replayFrom != nil || (!$0.isDelivering && $0.hasWork) } }

    /// Called after a local commit: delivers `record` and anything before it not yet delivered.
    func didCommit(_ record: CommitRecord, core: StoreCore) {
        // Pairs with the add of `register`: either the registration's snapshot saw this
        // commit, or this load sees its interest.
        atomicMemoryFence(ordering: .sequentiallyConsistent)
        guard interest.load(ordering: .relaxed) > 0 else { return }
        deliver(upTo: record.sequence, local: record, core: core)
    }

    /// Delivers every record up to `sequence`, reading from the log what is not in hand; with
    /// `compare`, then compares the observed keys with the store.
    func deliver(upTo sequence: UInt64, compare: Bool = false, local: CommitRecord? = nil, core: StoreCore) {
        // This process's commit of keys nobody here observes (the common case once any observer
        // exists): one lock section, no lists built. Measured: a set in a store with one observer
        // of another key cost 1.13–1.14× a set in a store with none, alternated in one run.
        if !compare, let local, local.sequence == sequence, state.withLock({ $0.passUnobserved(local) }) { return }
        let starts = state.withLock { state in
            state.target = max(state.target, sequence)
            if compare { state.needsComparing = true }
            guard !state.isDelivering, state.hasWork else { return false }
            state.isDelivering = true
            return true
        }
        guard starts else { return }
        while let work = nextWork() {
            do {
                if !work.compare, let local, work.from + 1 == work.target, local.sequence == work.target {
                    dispatch(local)
                    finish(through: local.sequence)
                } else {
                    try deliverFromStore(after: work.from, compare: work.compare, core: core)
                }
            } catch is EnclosingSnapshot {
                // This thread is inside `read { }` and another process grew the map: it cannot
                // read past its scope's snapshot until the scope ends. The work is put back for
                // the watcher, which reads once the map is adopted (`replayFrom` makes it deliver
                // even when it sees no new commit; `from` is `delivered` unless a replay).
                state.withLock { state in
                    state.replayFrom = min(state.replayFrom ?? .max, work.from)
                    if work.compare { state.needsComparing = true }
                    state.isDelivering = false
                }
                waiterIfClaimed?.wake()
                return
            } catch {
                // The store could not be read: report, and compare at the next delivery, which
                // any later commit starts, instead of retrying now. Not when the store is
                // closing: a delivery that the close overtook is no error of the user's.
                if !state.withLock({ $0.isClosed }) { core.reporter.reportOnce(error) }
                state.withLock { state in
                    state.needsComparing = true
                    state.isDelivering = false
                }
                return
            }
        }
    }

    /// A delivery's read was answered from this thread's enclosing `read { }` snapshot.
    private struct EnclosingSnapshot: Error {}

    private struct Work {
        var from: UInt64
        var target: UInt64
        var compare: Bool
    }

    /// What to deliver next, or nil (and delivery ends) when everything known is delivered.
    private func nextWork() -> Work? {
        state.withLock { state in
            guard state.hasWork else {
                state.isDelivering = false
                return nil
            }
            defer { (state.needsComparing, state.replayFrom) = (false, nil) }
            if state.replayFrom != nil {
                // The replay begins: its observers take part from its first record on.
                for name in state.replayNames {
                    guard var observers = state.keys[name] else { continue }
                    for id in observers.keys { observers[id]?.awaitsReplay = false }
                    state.keys[name] = observers
                }
                state.replayNames = []
            }
            // A replay also compares: a change that no record holds (a client that bypasses the
            // log), compared for the others while its observers waited, reaches them too.
            return Work(
                from: min(state.delivered, state.replayFrom ?? .max), target: state.target,
                compare: state.needsComparing || state.replayFrom != nil)
        }
    }

    private func finish(through sequence: UInt64) {
        state.withLock { state in
            state.delivered = max(state.delivered, sequence)
            state.dispatched = max(state.dispatched, sequence)
            state.target = max(state.target, sequence)
        }
    }

    /// Reads, in one snapshot, every record after `from` and, when some are missing or
    /// `compare` asks, the observed keys' values; delivers the records, then the differences.
    private func deliverFromStore(after from: UInt64, compare: Bool, core: StoreCore) throws {
        let (names, lastID) = observedKeys
        logReads.add(1, ordering: .relaxed)
        if let hook = beforeDeliveryRead.withLock({ $0 }) { hook() }
        let batch = try core.environment.withRead { transaction in
            // The snapshot of an enclosing `read { }` is older than what delivery has passed.
            guard !transaction.isEnclosingSnapshot else { throw EnclosingSnapshot() }
            let log = try core.readLog(after: from, in: transaction)
            let values =
                compare || log.isIncomplete
                ? try names.map { try core.encodedValue(named: $0, in: transaction) } : nil
            return (log: log, values: values, snapshot: transaction.id)
        }
        for damaged in batch.log.damaged { core.reporter.reportOnce(damaged) }
        var gaps = batch.log.gaps[...]
        for record in batch.log.records {
            while let gap = gaps.first, gap < record.sequence {
                skip(through: gap)
                gaps.removeFirst()
            }
            dispatch(record)
        }
        for gap in gaps { skip(through: gap) }
        if let values = batch.values {
            self.compare(zip(names, values), at: batch.log.newest, in: batch.snapshot, placingThrough: lastID)
        }
        finish(through: batch.log.newest)
    }

    /// Passes records up to `sequence` that could not be delivered (pruned before this process
    /// read them, or damaged): tells the commit and prefix observers positioned before it that
    /// want to know (`missed`; the `updates(prefix:)` streams end there instead of handing over
    /// the records after a gap). Key observers get the changes by the comparison that follows.
    /// A gap in records read again for key observers (see `register`) is none for the others.
    private func skip(through sequence: UInt64) {
        let told = state.withLock { state -> [CommitObserver] in
            guard sequence > state.dispatched else { return [] }
            // A registration from an older snapshot reads again: it would miss them too.
            state.dispatched = sequence
            var told = state.commitObservers.values.filter { $0.missed != nil && $0.position < sequence }
            for observers in state.prefixes.values {
                told += observers.values.filter { $0.missed != nil && $0.position < sequence }
            }
            return told
        }
        for observer in told where observer.activity.isActive.load(ordering: .acquiring) { observer.missed?() }
    }

    /// Delivers one record: the key observers positioned before it, then the commit observers.
    private func dispatch(_ record: CommitRecord) {
        let sequence = record.sequence
        let (keyCalls, prefixCalls, commitCalls) = state.withLock {
            state -> ([Call], [(CommitObserver, [Int])], [CommitObserver]) in
            // A record read again for key observers that start before it (see `register`):
            // every commit and prefix observer has it already.
            let isReplay = sequence <= state.dispatched
            state.dispatched = max(state.dispatched, sequence)
            var calls: [Call] = []
            // Per prefix observer: the indices of the record's changes under its prefix.
            var matches: [UInt64: (observer: CommitObserver, changes: [Int])] = [:]
            for (index, change) in record.changes.enumerated() {
                let name = Array(change.key.utf8)
                if state.keys[name] != nil {
                    calls += Self.advance(&state.keys[name], to: change.encodedValue, at: sequence, after: sequence - 1)
                }
                guard !isReplay, !state.prefixLengths.isEmpty else { continue }
                for length in state.prefixLengths.keys where length <= name.count {
                    guard let observers = state.prefixes[Array(name[..<length])] else { continue }
                    for (id, observer) in observers where observer.position < sequence {
                        matches[id, default: (observer, [])].changes.append(index)
                    }
                }
            }
            let prefixCalls = matches.sorted { $0.key < $1.key }.map { ($0.value.observer, $0.value.changes) }
            return (calls, prefixCalls, isReplay ? [] : state.commitObservers.values.filter { $0.position < sequence })
        }
        for call in keyCalls { call.run() }
        for (observer, changes) in prefixCalls where observer.activity.isActive.load(ordering: .acquiring) {
            observer.handler(
                CommitRecord(
                    sequence: record.sequence, timestamp: record.timestamp, processID: record.processID,
                    changes: changes.map { record.changes[$0] }))
        }
        for observer in commitCalls where observer.activity.isActive.load(ordering: .acquiring) {
            observer.handler(record)
        }
    }

    /// Compares each observed key's observers with the store's bytes as of `sequence`, read in
    /// the snapshot with transaction ID `snapshot`. Observers whose start could not be read start
    /// here if registered before the snapshot (IDs up to `lastID`); a later one waits for the
    /// comparison its registration asked for.
    ///
    /// A key observer that started from a newer snapshot than this one is left as it is: the log
    /// can end at the same sequence in both, with a write that bypasses the log between them, and
    /// this snapshot's bytes are then older than the observer's start — told to it as a change
    /// back and, at the next comparison, forth again. What follows its own start reaches it as
    /// for the others: records through delivery, unlogged writes through the watcher's count.
    private func compare(
        _ values: some Sequence<([UInt8], [UInt8]?)>, at sequence: UInt64, in snapshot: Int,
        placingThrough lastID: UInt64
    ) {
        let calls = state.withLock { state -> [Call] in
            state.dispatched = max(state.dispatched, sequence)
            // Commit and prefix observers whose start could not be read start here: the
            // registry's position they would otherwise take stays behind while nobody observes,
            // and they got the records of commits made before their registration.
            Self.place(&state.commitObservers, at: sequence, through: lastID)
            for prefix in Array(state.prefixes.keys) {
                Self.place(&state.prefixes[prefix, default: [:]], at: sequence, through: lastID)
            }
            var calls: [Call] = []
            // Observers registered since the names were listed (IDs past `lastID`).
            let registeredSince = state.nextID > lastID
            var listed = Set<[UInt8]>()
            for (name, bytes) in values {
                if registeredSince { listed.insert(name) }
                calls += Self.advance(
                    &state.keys[name], to: bytes, at: sequence, after: sequence, placingThrough: lastID,
                    snapshot: snapshot)
            }
            // A key observer of a name that was not listed, registered after the list was made
            // from a snapshot older than this one, may have missed what this comparison stands in
            // for (pruned records, an unlogged write): compare again, with its name listed.
            if registeredSince, !state.needsComparing {
                state.needsComparing = state.keys.contains { name, observers in
                    !listed.contains(name) && observers.contains { $0.key > lastID && $0.value.position < sequence }
                }
            }
            return calls
        }
        for call in calls { call.run() }
    }

    /// One callback to make outside the lock.
    private struct Call {
        let observer: KeyObserver
        let old: [UInt8]?
        let new: [UInt8]?
        let sequence: UInt64

        func run() {
            guard observer.activity.isActive.load(ordering: .acquiring) else { return }
            observer.handler(old, new, sequence)
        }
    }

    /// Starts at `sequence` the commit or prefix observers whose start could not be read
    /// (position `.max`) and that were registered before the comparison's snapshot (IDs up to
    /// `lastID`).
    private static func place(
        _ observers: inout [UInt64: CommitObserver], at sequence: UInt64, through lastID: UInt64
    ) {
        for (id, observer) in observers where observer.position == .max && id <= lastID {
            observers[id]?.position = sequence
        }
    }

    /// Moves a key's observers positioned at or before `limit` to `bytes` at `sequence`;
    /// returns the calls to make for those to which that is a change. Observers without a
    /// start take `bytes` as their baseline only with an ID up to `placingThrough`. With
    /// `snapshot` (a comparison's), observers that started from a newer snapshot are left out.
    private static func advance(
        _ observers: inout [UInt64: KeyObserver]?, to bytes: [UInt8]?, at sequence: UInt64, after limit: UInt64,
        placingThrough lastID: UInt64 = 0, snapshot: Int = .max
    ) -> [Call] {
        guard var all = observers else { return [] }
        var calls: [Call] = []
        for (id, observer) in all
        where observer.position <= limit && !observer.awaitsReplay && observer.startTransaction <= snapshot {
            // Without a start (its read failed), a comparison whose snapshot follows the
            // registration places an observer, never a record (0 from `dispatch`): records after
            // its position, and an earlier snapshot, may be older than its registration.
            if case .unknown = observer.baseline, id > lastID { continue }
            var moved = observer
            moved.baseline = .known(bytes)
            moved.position = sequence
            all[id] = moved
            if case .known(let old) = observer.baseline, old != bytes {
                calls.append(Call(observer: observer, old: old, new: bytes, sequence: sequence))
            }
        }
        observers = all
        return calls
    }
}

extension StoreCore {
    /// Log records read for delivery: damaged ones are skipped and reported, not fatal.
    struct LogBatch {
        var records: [CommitRecord] = []
        var damaged: [PersistentDefaultsError] = []
        /// The newest sequence seen (the start when there is none).
        var newest: UInt64
        /// Whether a record after the start is missing or damaged.
        var isIncomplete = false
        /// The last sequence of each run of missing or damaged records, in order.
        var gaps: [UInt64] = []
    }

    /// Every record after `sequence` in `transaction`, in order; a record that is missing
    /// (pruned) or damaged makes the batch incomplete instead of failing it.
    func readLog(after sequence: UInt64, in transaction: Transaction) throws -> LogBatch {
        var batch = LogBatch(newest: sequence)
        try forEachLogRecord(after: sequence, in: transaction) { number, record in
            if let number {
                if number != batch.newest &+ 1 {
                    batch.isIncomplete = true
                    if number > batch.newest { batch.gaps.append(number - 1) }
                }
                batch.newest = number
            }
            switch record {
            case .success(let record): batch.records.append(record)
            case .failure(let error):
                batch.isIncomplete = true
                batch.damaged.append(error)
                if let number { batch.gaps.append(number) }
            }
            return true
        }
        return batch
    }
}

extension Dictionary where Value == Int {
    /// Counts one more `key`.
    fileprivate mutating func countUp(_ key: Key) { self[key, default: 0] += 1 }

    /// Counts one less `key`, removing it at zero.
    fileprivate mutating func countDown(_ key: Key) {
        guard let count = self[key] else { return }
        self[key] = count > 1 ? count - 1 : nil
    }
}
