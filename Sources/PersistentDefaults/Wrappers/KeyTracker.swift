import Observation
import Synchronization

/// Connects one key of one store to the Observation framework, for one wrapper, and holds
/// what the wrapper reads: the store and the key.
///
/// A read through ``PersistentDefault`` calls ``access()``, which registers a dependency when
/// it happens inside `withObservationTracking` (SwiftUI's view updates use the same mechanism).
/// Every commit that changes the key — from this process or another one — then calls
/// `withMutation`, which fires the tracked `onChange`.
///
/// Each wrapper made (its copies share it) has a tracker of its own; the trackers of one key
/// name share one ``KeyObservation`` — one store observation and one observed ``TrackedKey`` —
/// while any of them lives. The last one's release takes the observation out of the store's
/// table and cancels it (see `StoreCore.releaseObservation`); a wrapper made for the name
/// afterwards gets a new one, started by its own first read. Before, the table kept every
/// name's observation until the store closed: an app that made wrappers for names made at run
/// time kept an observer, and its delivery work, for every name ever read.
///
/// The wrapper's only stored property: a read then retains one object, not three (the store,
/// the key and the tracker, which the caller's copy of the wrapper retained one by one), and
/// reaches the store and the key through `let` fields of an object it already holds, which the
/// compiler reads without retaining (callgrind, 1,000 wrappers read in scattered order: 2,558 →
/// 2,464 instructions a read; docs/benchmarks.md, session 12).
///
/// No weak references: a weakly referenced object gets a side table, and then every retain and
/// release of it takes the slow path (measured: 60–70 % of the wrapper's cost over `store[key]`).
/// The store observation's callback holds the ``TrackedKey`` strongly (it holds nothing back).
/// A tracker holds its store strongly: the core's table holds observations, not trackers, so
/// that makes no cycle, and a release after the store closed finds nothing to release.
@usableFromInline
final class KeyTracker<Value: Sendable>: Sendable {
    /// The store the wrapper reads and writes.
    @usableFromInline let store: PersistentDefaults
    /// The key the wrapper reads and writes.
    @usableFromInline let key: PersistentDefaults.Key<Value>
    /// The observed object of the key name, the same for every tracker of it.
    private let subject: TrackedKey
    /// Whether the shared observation was seen started; after that a read only loads this.
    private let isStarted = Atomic<Bool>(false)
    private let observation: KeyObservation

    init(observation: KeyObservation, store: PersistentDefaults, key: PersistentDefaults.Key<Value>) {
        self.observation = observation
        subject = observation.subject
        self.store = store
        self.key = key
    }

    deinit { store.core.releaseObservation(observation, named: key.nameBytes) }

    /// Registers a read of the key with the Observation framework; the first read also makes
    /// sure the store observation that feeds it is in place.
    @usableFromInline
    func access() {
        subject.access()
        if !isStarted.load(ordering: .acquiring) { startObserving() }
    }

    private func startObserving() {
        observation.start(store.core)
        isStarted.store(true, ordering: .releasing)
    }
}

/// The store observation of one key name that feeds its ``TrackedKey``, shared by the
/// ``KeyTracker``s of that name.
final class KeyObservation: Sendable {
    /// The observed object; what the store observation's callback holds.
    let subject = TrackedKey()
    private let token = Locked<ObservationToken?>(nil)
    private let isStarted = Atomic<Bool>(false)
    private let begin: @Sendable (StoreCore, TrackedKey) -> ObservationToken

    init(begin: @escaping @Sendable (StoreCore, TrackedKey) -> ObservationToken) { self.begin = begin }

    /// Starts the store observation that feeds ``TrackedKey/changed()`` unless it runs; the
    /// first one to finish is kept, and this returns only once one is in place, so that no
    /// reader misses a change after its read.
    ///
    /// Not under the lock: the registration reads the store, which after another process grew
    /// the map waits for every `read { }` scope of this process to end — one whose first read of
    /// the key would wait for the lock — and reports an invalid name to the user's error handler,
    /// which may read the property. Threads whose first reads race each register; the
    /// registrations that lose are cancelled.
    func start(_ core: StoreCore) {
        guard !isStarted.load(ordering: .acquiring) else { return }
        let started = begin(core, subject)
        let surplus = token.withLock { token -> ObservationToken? in
            guard token == nil else { return started }
            token = started
            isStarted.store(true, ordering: .releasing)
            return nil
        }
        surplus?.cancel()
    }

    /// Cancels the store observation: the last tracker of the name is gone, so nothing reads
    /// through this any more. The cancellation runs after the lock.
    func stop() {
        let stopped = token.withLock { token in
            defer { token = nil }
            return token
        }
        stopped?.cancel()
    }
}

/// The `Observable` side of a ``KeyObservation``: a change counter and its registrar.
final class TrackedKey: Observable, Sendable {
    private let registrar = ObservationRegistrar()
    private let changes = Atomic<Int>(0)

    /// How many changes were seen; the observed property.
    var changeCount: Int { changes.load(ordering: .relaxed) }

    /// Made once: a key-path literal is looked up (`swift_getKeyPath`) and released on every
    /// evaluation, and the wrapper's read calls `access()` each time.
    private static let changeCountPath: KeyPath<TrackedKey, Int> & Sendable = \.changeCount

    @inline(__always)
    func access() { registrar.access(self, keyPath: Self.changeCountPath) }

    /// Tells tracked readers that the key changed.
    func changed() {
        registrar.withMutation(of: self, keyPath: \.changeCount) { _ = changes.add(1, ordering: .relaxed) }
    }
}

extension StoreCore {
    /// A key name's entry in the table of observations: the observation and how many trackers
    /// share it.
    struct TrackedName {
        let observation: KeyObservation
        var trackers: Int
    }

    /// A tracker of `key` in `store` (whose core this is), for a wrapper: it shares the
    /// observation of the key's name (its UTF-8 bytes) while another tracker of it lives, else a
    /// new one.
    func tracker<Value>(for key: PersistentDefaults.Key<Value>, in store: PersistentDefaults) -> KeyTracker<Value> {
        let observation = trackedNames.withLock { names in
            if let observation = names[key.nameBytes]?.observation {
                names[key.nameBytes]?.trackers += 1
                return observation
            }
            // The core comes from the reading tracker, not from this call: the table holds the
            // observation, which must not hold the core that holds the table.
            let observation = KeyObservation { core, subject in
                core.observeChanges(of: key) { subject.changed() }
            }
            names[key.nameBytes] = TrackedName(observation: observation, trackers: 1)
            return observation
        }
        return KeyTracker(observation: observation, store: store, key: key)
    }

    /// A tracker of the key named `name` that shared `observation` is gone; the last one takes
    /// the observation out of the table and cancels it, after the lock.
    ///
    /// Under the table's lock, like `tracker(for:)`: a tracker made meanwhile either finds the
    /// entry with its count raised (and this release leaves it) or finds no entry and makes a
    /// new observation, which its own first read starts, whatever the cancellation of this one
    /// does. Compared by identity: after the store closed (the table emptied) a release changes
    /// nothing.
    func releaseObservation(_ observation: KeyObservation, named name: [UInt8]) {
        let released = trackedNames.withLock { names -> KeyObservation? in
            guard let entry = names[name], entry.observation === observation else { return nil }
            guard entry.trackers == 1 else {
                names[name]?.trackers -= 1
                return nil
            }
            names[name] = nil
            return observation
        }
        guard let released else { return }
        if let hook = beforeObservationStop.withLock({ $0 }) { hook() }
        released.stop()
    }
}
