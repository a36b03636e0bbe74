import Dispatch
import Synchronization

/// The observers of one store in this process, and the delivery of committed changes to them.
///
/// Delivery follows the commit log: records are delivered once each, in sequence order, whether
/// this process or another one committed them. The thread that commits delivers (its callbacks
/// run after the commit returns from LMDB, before `set`/`write` returns); if another thread is
/// already delivering, that thread delivers the new record too, so order holds. Callbacks run
/// without any lock held, so they may read and write the store; their commits are delivered after
/// the current record.
final class ObserverRegistry: Sendable {
    /// A key observer: gets the old and new stored bytes of its key.
    final class KeyObserver: Sendable {
        /// Only records after this sequence are for this observer.
        let asOf: UInt64
        let isActive = Atomic<Bool>(true)
        let handler: @Sendable (_ old: [UInt8]?, _ new: [UInt8]?, _ sequence: UInt64) -> Void

        init(asOf: UInt64, handler: @escaping @Sendable ([UInt8]?, [UInt8]?, UInt64) -> Void) {
            self.asOf = asOf
            self.handler = handler
        }
    }

    /// A commit observer: gets whole records.
    final class CommitObserver: Sendable {
        let asOf: UInt64
        let isActive = Atomic<Bool>(true)
        let handler: @Sendable (CommitRecord) -> Void

        init(asOf: UInt64, handler: @escaping @Sendable (CommitRecord) -> Void) {
            self.asOf = asOf
            self.handler = handler
        }
    }

    /// The observers of one key and the key's stored bytes as of `position`.
    struct KeyEntry {
        var bytes: [UInt8]?
        var position: UInt64
        var observers: [UInt64: KeyObserver] = [:]
    }

    private struct State {
        var keys: [String: KeyEntry] = [:]
        var commitObservers: [UInt64: CommitObserver] = [:]
        var nextID: UInt64 = 0
        /// Every record up to this sequence has been delivered.
        var delivered: UInt64 = 0
        /// Records up to this sequence are known to exist.
        var target: UInt64 = 0
        var isDelivering = false
        /// Observed keys must be compared with the store (a write that bypassed the log).
        var needsResynchronizing = false
        var isEmpty: Bool { keys.isEmpty && commitObservers.isEmpty }
    }

    private let state = Mutex(State())
    private let hasObservers = Atomic<Bool>(false)
    private let watcher = Mutex<ExternalWatcher?>(nil)

    // MARK: Registration

    /// Adds a key observer. `current` and `sequence` are the key's bytes and the newest sequence
    /// in one snapshot; `registered` runs under the registry lock, before any delivery can reach
    /// the new observer.
    func addKeyObserver(
        name: String, current: [UInt8]?, sequence: UInt64, core: StoreCore,
        handler: @escaping @Sendable ([UInt8]?, [UInt8]?, UInt64) -> Void,
        registered: () -> Void = {}
    ) -> ObservationToken {
        let id = register(as: sequence, core: core) { state, id in
            state.keys[name, default: KeyEntry(bytes: current, position: sequence)].observers[id] =
                KeyObserver(asOf: sequence, handler: handler)
            registered()
        }
        return ObservationToken { [weak self] in self?.removeKeyObserver(name: name, id: id) }
    }

    /// Adds a commit observer for records after `sequence`.
    func addCommitObserver(
        sequence: UInt64, core: StoreCore, handler: @escaping @Sendable (CommitRecord) -> Void
    ) -> ObservationToken {
        let id = register(as: sequence, core: core) { state, id in
            state.commitObservers[id] = CommitObserver(asOf: sequence, handler: handler)
        }
        return ObservationToken { [weak self] in self?.removeCommitObserver(id: id) }
    }

    /// Gives a new observer an ID and lets `insert` store it, under the lock; deliveries start
    /// at `sequence` when it is the first observer. Starts the watcher.
    private func register(as sequence: UInt64, core: StoreCore, _ insert: (inout State, UInt64) -> Void) -> UInt64 {
        let id = state.withLock { state in
            if state.isEmpty { state.delivered = max(state.delivered, sequence) }
            state.target = max(state.target, sequence)
            state.nextID += 1
            insert(&state, state.nextID)
            return state.nextID
        }
        hasObservers.store(true, ordering: .releasing)
        watcher.withLock { watcher in
            if watcher == nil { watcher = ExternalWatcher(core: core) }
        }
        return id
    }

    private func removeKeyObserver(name: String, id: UInt64) {
        let removed = state.withLock { state -> KeyObserver? in
            let observer = state.keys[name]?.observers.removeValue(forKey: id)
            if state.keys[name]?.observers.isEmpty == true { state.keys[name] = nil }
            return observer
        }
        removed?.isActive.store(false, ordering: .releasing)
        didRemove()
    }

    private func removeCommitObserver(id: UInt64) {
        let removed = state.withLock { $0.commitObservers.removeValue(forKey: id) }
        removed?.isActive.store(false, ordering: .releasing)
        didRemove()
    }

    private func didRemove() {
        guard state.withLock({ $0.isEmpty }) else { return }
        hasObservers.store(false, ordering: .releasing)
        stopWatcher()
    }

    /// The names of the keys that have observers.
    var observedKeys: [String] { state.withLock { Array($0.keys.keys) } }

    // MARK: Delivery

    /// Called after a local commit: delivers `record` and anything before it not yet delivered.
    func didCommit(_ record: CommitRecord, core: StoreCore) {
        guard hasObservers.load(ordering: .acquiring) else { return }
        deliver(upTo: record.sequence, local: record, core: core)
    }

    /// Asks for observed keys to be compared with the store, then delivers.
    func requestResynchronizing(core: StoreCore) {
        state.withLock { $0.needsResynchronizing = true }
        deliver(upTo: 0, core: core)
    }

    private enum Work {
        case records(after: UInt64, through: UInt64)
        case resynchronize
    }

    /// Delivers every record up to `sequence`, reading from the log what is not in hand.
    func deliver(upTo sequence: UInt64, local: CommitRecord? = nil, core: StoreCore) {
        let starts = state.withLock { state in
            state.target = max(state.target, sequence)
            guard !state.isDelivering, state.delivered < state.target || state.needsResynchronizing else {
                return false
            }
            state.isDelivering = true
            return true
        }
        guard starts else { return }
        while let work = nextWork() {
            do {
                guard case .records(let from, let to) = work else {
                    try resynchronize(core)
                    continue
                }
                let records: [CommitRecord]
                if let local, from + 1 == to, local.sequence == to {
                    records = [local]
                } else {
                    records = try core.environment.withRead { transaction in
                        try core.commits(after: from, limit: Int(to - from), in: transaction)
                    }
                }
                if records.first.map({ $0.sequence > from + 1 }) ?? true {
                    // The records this process needed were pruned: compare instead.
                    try resynchronize(core)
                }
                for record in records where record.sequence > from { dispatch(record) }
                state.withLock { $0.delivered = max($0.delivered, to) }
            } catch {
                core.reporter.report(error)
                state.withLock { $0.isDelivering = false }
                return
            }
        }
    }

    /// What to deliver next, or nil (and delivery ends) when everything known is delivered.
    private func nextWork() -> Work? {
        state.withLock { state in
            if state.needsResynchronizing {
                state.needsResynchronizing = false
                return .resynchronize
            }
            guard state.delivered < state.target else {
                state.isDelivering = false
                return nil
            }
            return .records(after: state.delivered, through: state.target)
        }
    }

    private func dispatch(_ record: CommitRecord) {
        for change in record.changes {
            let calls = state.withLock { state -> (old: [UInt8]?, observers: [KeyObserver])? in
                guard var entry = state.keys[change.key], entry.position < record.sequence else { return nil }
                let old = entry.bytes
                entry.bytes = change.encodedValue
                entry.position = record.sequence
                state.keys[change.key] = entry
                guard old != change.encodedValue else { return nil }
                return (old, entry.observers.values.filter { $0.asOf < record.sequence })
            }
            guard let calls else { continue }
            notify(calls.observers, old: calls.old, new: change.encodedValue, sequence: record.sequence)
        }
        let commitObservers = state.withLock { $0.commitObservers.values.filter { $0.asOf < record.sequence } }
        for observer in commitObservers where observer.isActive.load(ordering: .acquiring) {
            observer.handler(record)
        }
    }

    /// Compares every observed key with the store and reports the keys that differ: used when
    /// log records were pruned before this process read them, and when a client that bypasses
    /// the log wrote.
    private func resynchronize(_ core: StoreCore) throws {
        let names = observedKeys
        guard !names.isEmpty else { return }
        let (current, sequence) = try core.environment.withRead { transaction in
            let values = try names.map { try core.encodedValue(named: Array($0.utf8), in: transaction) }
            return (values, try core.lastSequence(in: transaction))
        }
        for (name, bytes) in zip(names, current) {
            let calls = state.withLock { state -> (old: [UInt8]?, observers: [KeyObserver])? in
                guard var entry = state.keys[name], entry.bytes != bytes else { return nil }
                let old = entry.bytes
                entry.bytes = bytes
                entry.position = max(entry.position, sequence)
                state.keys[name] = entry
                return (old, Array(entry.observers.values))
            }
            guard let calls else { continue }
            notify(calls.observers, old: calls.old, new: bytes, sequence: sequence)
        }
    }

    /// Calls the key observers that are still active, outside the lock.
    private func notify(_ observers: [KeyObserver], old: [UInt8]?, new: [UInt8]?, sequence: UInt64) {
        for observer in observers where observer.isActive.load(ordering: .acquiring) {
            observer.handler(old, new, sequence)
        }
    }

    /// Stops the watcher; the store is closing.
    func close() { stopWatcher() }

    private func stopWatcher() {
        let stopped = watcher.withLock { watcher in
            defer { watcher = nil }
            return watcher
        }
        stopped?.stop()
    }
}
