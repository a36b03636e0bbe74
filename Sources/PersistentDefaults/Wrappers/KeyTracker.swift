import Observation
import Synchronization

/// Connects one key of one store to the Observation framework.
///
/// A read through ``PersistentDefault`` calls ``access(in:)``, which registers a dependency when
/// it happens inside `withObservationTracking` (SwiftUI's view updates use the same mechanism).
/// Every commit that changes the key — from this process or another one — then calls
/// `withMutation`, which fires the tracked `onChange`.
///
/// No weak references: a weakly referenced object gets a side table, and then every retain and
/// release of it takes the slow path (measured: 60–70 % of the wrapper's cost over `store[key]`).
/// The store observation's callback holds the ``TrackedKey`` strongly (it holds
/// nothing back), and the core is passed in by the reading wrapper, which keeps it alive.
@usableFromInline
final class KeyTracker: Sendable {
    /// The observed object; what the store observation's callback holds.
    let subject = TrackedKey()
    private let observation = Locked<ObservationToken?>(nil)
    private let isStarted = Atomic<Bool>(false)
    private let start: @Sendable (StoreCore, TrackedKey) -> ObservationToken

    init(start: @escaping @Sendable (StoreCore, TrackedKey) -> ObservationToken) { self.start = start }

    /// Registers a read of the key with the Observation framework; the first read also starts
    /// the store observation that feeds it.
    @usableFromInline
    func access(in core: StoreCore) {
        subject.access()
        if !isStarted.load(ordering: .acquiring) { startObserving(core) }
    }

    /// Starts the store observation that feeds ``TrackedKey/changed()``; the first one to
    /// finish is kept.
    ///
    /// Not under the lock: the registration reads the store, which after another process grew
    /// the map waits for every `read { }` scope of this process to end — one whose first read of
    /// the key would wait for the lock — and reports an invalid name to the user's error handler,
    /// which may read the property. Threads whose first reads race each register; the
    /// registrations that lose are cancelled, and each reader returns only once one is in place,
    /// so none misses a change after its read.
    private func startObserving(_ core: StoreCore) {
        let started = start(core, subject)
        let surplus = observation.withLock { token -> ObservationToken? in
            guard token == nil else { return started }
            token = started
            isStarted.store(true, ordering: .releasing)
            return nil
        }
        surplus?.cancel()
    }
}

/// The `Observable` side of a ``KeyTracker``: a change counter and its registrar.
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
    /// The tracker of `key` in this store, made once per key name (its UTF-8 bytes).
    func tracker<Value>(for key: PersistentDefaults.Key<Value>) -> KeyTracker {
        trackers.withLock { trackers in
            if let tracker = trackers[key.nameBytes] { return tracker }
            // The core comes from the reading wrapper, not from this call: the handle that asked
            // first may be gone by the first read; the core owns the tracker and its token.
            let tracker = KeyTracker { core, subject in
                core.observeChanges(of: key) { subject.changed() }
            }
            trackers[key.nameBytes] = tracker
            return tracker
        }
    }
}
