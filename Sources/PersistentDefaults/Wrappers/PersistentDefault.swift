import Dispatch

/// A property stored in a ``PersistentDefaults`` store.
///
/// ```swift
/// final class Settings {
///     @PersistentDefault(.launchCount, in: store) var launchCount       // a typed key
///     @PersistentDefault(.theme) var theme                               // PersistentDefaults.standard
///     @PersistentDefault("someKey", in: store) var someValue = 0         // a name and an initial value
/// }
/// settings.launchCount += 1                                   // one commit, durable per the store's mode
/// for await count in settings.$launchCount.values { … }       // the current value, then each change
/// let token = settings.$launchCount.observe { change in … }   // change.oldValue, change.newValue
/// ```
///
/// Reads go to the store every time (about as fast as a raw LMDB read), so a value is never
/// stale after a commit from this or another process. A read inside `withObservationTracking`
/// registers a dependency, and every commit that changes the key fires `onChange` — in an
/// `@Observable` class, mark the property `@ObservationIgnored` and the wrapper does the tracking.
/// A stored value that does not decode reads as the default and is reported once through the
/// store's ``PersistentDefaults/Options/errorHandler``; a write that fails is reported and
/// leaves the old value.
@propertyWrapper
public struct PersistentDefault<Value: Sendable>: Sendable {
    /// The store the property lives in.
    public var store: PersistentDefaults { tracker.store }
    /// The key the property reads and writes.
    public var key: PersistentDefaults.Key<Value> { tracker.key }
    /// This wrapper's (and its copies') tracker, which holds the store and the key: the key's
    /// store observation lives while a tracker of its name does. The only stored property, so
    /// that a read retains one object (see ``KeyTracker``).
    @usableFromInline let tracker: KeyTracker<Value>

    /// A property for a typed key.
    public init(_ key: PersistentDefaults.Key<Value>, in store: PersistentDefaults = .standard) {
        tracker = store.core.tracker(for: key, in: store)
    }

    /// A property for a key type (``PersistentDefaultsKey``), with its hooks and conversion.
    public init<K: PersistentDefaultsKey>(_ key: K, in store: PersistentDefaults = .standard)
    where K.Value == Value, K.Conversion.Stored: Codable {
        self.init(K.key, in: store)
    }

    /// A property for a key named `name` whose default is the initial value:
    /// `@PersistentDefault("someKey", in: store) var someValue = 0`.
    public init(wrappedValue: Value, _ name: String, in store: PersistentDefaults = .standard) where Value: Codable {
        self.init(PersistentDefaults.Key(name, default: wrappedValue), in: store)
    }

    /// The stored value, or the key's default.
    @inlinable
    public var wrappedValue: Value {
        get {
            tracker.access()
            return tracker.store[tracker.key]
        }
        nonmutating set { tracker.store[tracker.key] = newValue }
    }

    /// The projected value (`$property`): the value's changes, the key and the store.
    public var projectedValue: Projection { Projection(wrapper: self) }

    /// What `$property` gives: changes as an AsyncSequence or a callback, and a reset.
    public struct Projection: Sendable {
        let wrapper: PersistentDefault

        /// The key.
        public var key: PersistentDefaults.Key<Value> { wrapper.key }
        /// The store.
        public var store: PersistentDefaults { wrapper.store }

        /// The current value, then the value after each commit that changes it; a slow consumer
        /// sees the newest value, not a backlog.
        public var values: AsyncStream<Value> { wrapper.store.updates(for: wrapper.key) }

        /// Calls `handler` after each commit that changes the value, from any process; see
        /// ``PersistentDefaults/observe(_:queue:_:)-(Key<Value>,_,_)``.
        public func observe(
            queue: DispatchQueue? = nil, _ handler: @escaping @Sendable (KeyChange<Value>) -> Void
        ) -> ObservationToken {
            wrapper.store.observe(wrapper.key, queue: queue, handler)
        }

        /// The value, throwing when the store cannot be read or the value does not decode.
        public func value() throws -> Value { try wrapper.store.value(for: wrapper.key) }

        /// Sets the value, throwing instead of reporting a failure.
        public func set(_ value: Value) throws { try wrapper.store.set(value, for: wrapper.key) }

        /// Removes the stored value, so the property reads the default again.
        public func reset() throws { try wrapper.store.remove(wrapper.key) }
    }
}

#if canImport(Combine)
    import Combine

    extension PersistentDefault.Projection {
        /// A Combine publisher of the current value, then each committed change (Apple platforms).
        public var publisher: AnyPublisher<Value, Never> {
            let subject = CurrentValueSubject<Value, Never>(wrapper.wrappedValue)
            // Combine's subjects lock internally, and every send comes from the main queue.
            nonisolated(unsafe) let sendable = subject
            let token = observe(queue: .main) { sendable.send($0.newValue) }
            return subject.handleEvents(receiveCancel: { token.cancel() }).eraseToAnyPublisher()
        }
    }
#endif
