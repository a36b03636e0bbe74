import Dispatch

extension PersistentDefaults {
    /// Calls `handler` after every committed transaction that changed `key`, with the old and
    /// new value, until the returned token is cancelled or released.
    ///
    /// ```swift
    /// let observation = store.observe(.launchCount) { change in
    ///     print(change.oldValue, "→", change.newValue, "in commit", change.sequence)
    /// }
    /// ```
    ///
    /// - Never for a transaction that aborted or threw, never for a write that left the value as
    ///   it was, and once per transaction however often the key was written in it.
    /// - In commit order, also for commits made by other processes (noticed within 15 ms).
    /// - Every commit after the observer's start is delivered, none before.
    /// - Without `queue`, the callback runs on the committing thread before `set`/`write`
    ///   returns, unless another thread is delivering then, which delivers it next (for other
    ///   processes' commits: on the store's watcher thread). With `queue`, it is dispatched there
    ///   asynchronously, in order for a serial queue.
    /// - A key with an invalid name is reported through ``Options/errorHandler`` and not observed.
    /// - The callback may read and write the store; its writes are new commits, delivered after.
    /// - A stored value that does not decode as `Value` is reported through
    ///   ``Options/errorHandler``; such a change is not delivered.
    public func observe<Value>(
        _ key: Key<Value>, queue: DispatchQueue? = nil, _ handler: @escaping @Sendable (KeyChange<Value>) -> Void
    ) -> ObservationToken {
        observe(
            key, registered: { _ in },
            deliver: { change in
                if let queue { queue.async { handler(change) } } else { handler(change) }
            })
    }

    /// Observes a key type's value; see ``observe(_:queue:_:)-(Key<Value>,_,_)``.
    public func observe<K: PersistentDefaultsKey>(
        _ key: K, queue: DispatchQueue? = nil, _ handler: @escaping @Sendable (KeyChange<K.Value>) -> Void
    ) -> ObservationToken where K.Conversion.Stored: Codable {
        observe(K.key, queue: queue, handler)
    }

    /// Calls `handler` once per committed write transaction that changed at least one key, in
    /// commit order, from this process or another one, with the record from the commit log
    /// (``CommitRecord/changedKeys`` names the keys whose value changed).
    ///
    /// ```swift
    /// let commits = store.observeCommits { commit in print(commit.sequence, commit.changedKeys) }
    /// ```
    ///
    /// If this process falls so far behind that records were pruned before it read them, those
    /// records are not delivered here (key observers still learn of every change).
    public func observeCommits(
        queue: DispatchQueue? = nil, _ handler: @escaping @Sendable (CommitRecord) -> Void
    ) -> ObservationToken {
        core.observers.addCommitObserver(core: core) { record in
            if let queue { queue.async { handler(record) } } else { handler(record) }
        }
    }

    /// The key's value now, then its value after each commit that changes it.
    ///
    /// ```swift
    /// for await theme in store.updates(for: .theme) { apply(theme) }
    /// ```
    ///
    /// A consumer slower than the writers sees the newest value, not a backlog. The observation
    /// ends when the iterating task is cancelled or the stream is released.
    public func updates<Value>(for key: Key<Value>) -> AsyncStream<Value> {
        AsyncStream(bufferingPolicy: .bufferingNewest(1)) { continuation in
            let token = observe(
                key, registered: { continuation.yield($0) }, deliver: { continuation.yield($0.newValue) })
            continuation.onTermination = { _ in token.cancel() }
        }
    }

    /// A key type's values; see ``updates(for:)-(Key<Value>)``.
    public func updates<K: PersistentDefaultsKey>(for key: K) -> AsyncStream<K.Value>
    where K.Conversion.Stored: Codable {
        updates(for: K.key)
    }

    /// Registers a key observer that gets decoded changes; `registered` gets the value at the
    /// observer's start before any change can be delivered (under the registry lock: it must
    /// not block). A key with an invalid name is refused: the error is reported and the token
    /// observes nothing.
    private func observe<Value>(
        _ key: Key<Value>, registered: @escaping (Value) -> Void,
        deliver: @escaping @Sendable (KeyChange<Value>) -> Void
    ) -> ObservationToken {
        core.observe(key, registered: registered, deliver: deliver)
    }
}

extension StoreCore {
    /// Registers a key observer that gets decoded changes; see `PersistentDefaults.observe`.
    func observe<Value>(
        _ key: PersistentDefaults.Key<Value>, registered: (Value) -> Void,
        deliver: @escaping @Sendable (KeyChange<Value>) -> Void
    ) -> ObservationToken {
        do {
            try key.validate()
        } catch {
            reporter.report(error)
            registered(key.defaultValue)
            return ObservationToken {}
        }
        let reporter = self.reporter
        let decode: @Sendable ([UInt8]?) -> Value? = { bytes in
            guard let bytes else { return key.defaultValue }
            do throws(StoredValueError) {
                return try key.codec.decode(bytes)
            } catch {
                reporter.reportOnce(
                    PersistentDefaultsError.decodingFailed(
                        key: key.name, type: "\(Value.self)", reason: error.description))
                return nil
            }
        }
        return observers.addKeyObserver(
            name: key.nameBytes, core: self,
            handler: { old, new, sequence in
                guard let newValue = decode(new) else { return }
                let change = KeyChange(
                    key: key.name, oldValue: decode(old) ?? key.defaultValue, newValue: newValue, sequence: sequence)
                deliver(change)
            },
            registered: { registered(decode($0) ?? key.defaultValue) })
    }
}
