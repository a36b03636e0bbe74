import Observation
import Synchronization

/// Connects one key of one store to the Observation framework.
///
/// A read through ``PersistentDefault`` calls ``access()``, which registers a dependency when it
/// happens inside `withObservationTracking` (SwiftUI's view updates use the same mechanism).
/// Every commit that changes the key — from this process or another one — then calls
/// `withMutation`, which fires the tracked `onChange`.
final class KeyTracker: Observable, Sendable {
    private let registrar = ObservationRegistrar()
    private let changes = Atomic<Int>(0)
    private let observation = Locked<ObservationToken?>(nil)
    private let isStarted = Atomic<Bool>(false)
    private let start: @Sendable (KeyTracker) -> ObservationToken

    init(start: @escaping @Sendable (KeyTracker) -> ObservationToken) { self.start = start }

    /// How many changes were seen; the observed property.
    var changeCount: Int { changes.load(ordering: .relaxed) }

    /// Registers a read of the key with the Observation framework.
    @inline(__always)
    func access() {
        registrar.access(self, keyPath: \.changeCount)
        if !isStarted.load(ordering: .acquiring) { startObserving() }
    }

    /// Starts the store observation that feeds ``changed()``, once.
    private func startObserving() {
        observation.withLock { token in
            guard token == nil else { return }
            token = start(self)
            isStarted.store(true, ordering: .releasing)
        }
    }

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
            // Through the core, not the handle that asked first: that handle may be gone by the
            // first read, and the core lives as long as any handle (and owns the tracker).
            let tracker = KeyTracker { [weak self] tracker in
                self?.observe(key, registered: { _ in }, deliver: { [weak tracker] _ in tracker?.changed() })
                    ?? ObservationToken {}
            }
            trackers[key.nameBytes] = tracker
            return tracker
        }
    }
}
