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
    /// - In commit order, also for commits made by other processes: woken through the store's
    ///   wake-up channel (tens of microseconds), or, for a writer that bypasses it (Python's
    ///   `lmdb`, `mdb_load`), at the next check within ``Options/fallbackCheckInterval``.
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
        let activity = ObserverRegistry.Activity()
        return core.observe(
            key, activity: activity, registered: nil, deliver: Self.calling(handler, on: queue, while: activity))
    }

    /// `handler` itself, or with `queue`, a function that dispatches it there asynchronously. A
    /// queued call runs only while `activity` (the token's) is active: a slow or blocked queue
    /// otherwise ran every change queued before `cancel()` after it had returned.
    private static func calling<Value: Sendable>(
        _ handler: @escaping @Sendable (Value) -> Void, on queue: DispatchQueue?,
        while activity: ObserverRegistry.Activity
    ) -> @Sendable (Value) -> Void {
        guard let queue else { return handler }
        return { value in
            queue.async { if activity.isActive.load(ordering: .acquiring) { handler(value) } }
        }
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
        let activity = ObserverRegistry.Activity()
        return core.observers.addCommitObserver(
            core: core, activity: activity, handler: Self.calling(handler, on: queue, while: activity))
    }

    /// Calls `handler` once per committed transaction that changed at least one key whose name
    /// starts with `prefix` (compared as UTF-8 bytes), with a record holding only those changes,
    /// in commit order, from this process or another one.
    ///
    /// ```swift
    /// let token = store.observe(prefix: "fleet.") { record in
    ///     for change in record.changes { print(record.sequence, change.key, change.encodedValue == nil ? "removed" : "set") }
    /// }
    /// ```
    ///
    /// The empty prefix observes every key. A commit that changes no key under an observed prefix
    /// costs a few dictionary lookups per changed key (one per distinct prefix length). Like
    /// ``observeCommits(queue:_:)``, it sees what the commit log holds: records pruned before this
    /// process read them, and writes of clients that bypass the log, are not delivered. A prefix
    /// longer than a key can be (511 bytes) is reported as
    /// ``PersistentDefaultsError/invalidKeyName(_:reason:)`` and observes nothing.
    public func observe(
        prefix: String, queue: DispatchQueue? = nil, _ handler: @escaping @Sendable (CommitRecord) -> Void
    ) -> ObservationToken {
        observe(prefix: prefix, queue: queue, handler, missed: nil)
    }

    /// `observe(prefix:queue:_:)`, calling `missed` where records it would have been given were
    /// skipped (pruned before this process read them, or damaged).
    private func observe(
        prefix: String, queue: DispatchQueue? = nil, _ handler: @escaping @Sendable (CommitRecord) -> Void,
        missed: (@Sendable () -> Void)?
    ) -> ObservationToken {
        let bytes = Array(prefix.utf8)
        guard bytes.count <= Keys.maximumNameLength else {
            core.reporter.report(
                PersistentDefaultsError.invalidKeyName(
                    prefix, reason: "a prefix of \(bytes.count) bytes is longer than any key can be"))
            return ObservationToken {}
        }
        let activity = ObserverRegistry.Activity()
        return core.observers.addPrefixObserver(
            prefix: bytes, core: core, activity: activity, handler: Self.calling(handler, on: queue, while: activity),
            missed: missed)
    }

    /// The records of ``observe(prefix:queue:_:)`` as an `AsyncSequence`; loses no record.
    ///
    /// ```swift
    /// for await record in store.updates(prefix: "fleet.") { apply(record) }
    /// ```
    ///
    /// It buffers up to `bufferLimit` records (default 10,000) that the consumer has not taken
    /// yet. A consumer that falls further behind is not given a record with a gap: the sequence
    /// ends after the last buffered record instead, and the consumer catches up with
    /// ``commits(after:limit:)`` from the last sequence it handled (while the log retains it)
    /// before it asks for a new sequence. The same when this process's delivery fell behind the
    /// log's retention (records pruned before it read them; see ``Options/logRetention``) or met
    /// a damaged record: the sequence ends after the last record before them. The sequence also
    /// ends when the store closes (its last handle is released).
    public func updates(prefix: String, bufferLimit: Int = 10_000) -> AsyncStream<CommitRecord> {
        AsyncStream(bufferingPolicy: .bufferingOldest(max(bufferLimit, 1))) { continuation in
            let tokens = endingWithStore(continuation)
            tokens.hold(
                observe(
                    prefix: prefix,
                    { record in
                        if case .dropped = continuation.yield(record) { continuation.finish() }
                    }, missed: { continuation.finish() }))
        }
    }

    /// The key's value now, then its value after each commit that changes it.
    ///
    /// ```swift
    /// for await theme in store.updates(for: .theme) { apply(theme) }
    /// ```
    ///
    /// A consumer slower than the writers sees the newest value, not a backlog. The observation
    /// ends when the iterating task is cancelled, the stream is released, or the store closes
    /// (its last handle is released): then the sequence ends.
    public func updates<Value>(for key: Key<Value>) -> AsyncStream<Value> {
        AsyncStream(bufferingPolicy: .bufferingNewest(1)) { continuation in
            // The start value is decoded after the registration, outside the registry's lock, so
            // a change may be delivered first: the start value, older, is then not yielded.
            let delivered = Locked(false)
            let tokens = endingWithStore(continuation)
            let token = observe(
                key,
                registered: { start in
                    delivered.withLock { if !$0 { continuation.yield(start) } }
                },
                deliver: { change in
                    delivered.withLock {
                        $0 = true
                        continuation.yield(change.newValue)
                    }
                })
            tokens.hold(token)
        }
    }

    /// Ends `continuation`'s stream when the store closes; the returned holder cancels the
    /// tokens it is given when the stream ends (its consumer cancelled, released it, the store
    /// closed, or a full buffer finished it).
    ///
    /// Call it before registering the stream's observer: the termination handler must be in
    /// place before the observer can deliver. AsyncStream does not call a handler set after the
    /// stream ended until the stream is released, so a stream that a delivery finished before
    /// it was set kept its observer and close action registered (and delivered to) for as long
    /// as anyone held it.
    private func endingWithStore<Element>(_ continuation: AsyncStream<Element>.Continuation) -> StreamTokens {
        let tokens = StreamTokens()
        continuation.onTermination = { _ in tokens.end() }
        tokens.hold(core.observers.onClose { continuation.finish() })
        return tokens
    }

    /// A key type's values; see ``updates(for:)-(Key<Value>)``.
    public func updates<K: PersistentDefaultsKey>(for key: K) -> AsyncStream<K.Value>
    where K.Conversion.Stored: Codable {
        updates(for: K.key)
    }

    /// Registers a key observer that gets decoded changes; `registered` gets the value at the
    /// observer's start, decoded after the registration with no lock of the store held (a
    /// type's decoding is the user's code), so a change may be delivered before it. A key with
    /// an invalid name is refused: the error is reported and the token observes nothing.
    private func observe<Value>(
        _ key: Key<Value>, registered: ((Value) -> Void)?,
        deliver: @escaping @Sendable (KeyChange<Value>) -> Void
    ) -> ObservationToken {
        core.observe(key, registered: registered, deliver: deliver)
    }
}

/// The observation tokens of one `updates` stream, cancelled when the stream ends; a token
/// given after the end is cancelled at once (the stream ended while it was being set up).
private final class StreamTokens: Sendable {
    private struct State {
        var hasEnded = false
        var tokens: [ObservationToken] = []
    }

    private let state = Locked(State())

    /// Keeps `token` until the stream ends; cancels it now if it has ended.
    func hold(_ token: ObservationToken) {
        let hasEnded = state.withLock { state in
            if !state.hasEnded { state.tokens.append(token) }
            return state.hasEnded
        }
        // Outside the lock: a cancellation takes the registry's lock.
        if hasEnded { token.cancel() }
    }

    /// Cancels the tokens held, and from now on each one given; the stream has ended.
    func end() {
        let tokens = state.withLock { state in
            state.hasEnded = true
            defer { state.tokens = [] }
            return state.tokens
        }
        for token in tokens { token.cancel() }
    }
}

extension StoreCore {
    /// Registers a key observer that is only told that the key changed, after each commit that
    /// changed it: no value is decoded, since nobody reads one (the property wrappers'
    /// Observation tracking; the tracked reader reads the value again when it needs it).
    func observeChanges<Value>(
        of key: PersistentDefaults.Key<Value>, _ changed: @escaping @Sendable () -> Void
    ) -> ObservationToken {
        guard isObservable(key) else { return ObservationToken {} }
        return observers.addKeyObserver(name: key.nameBytes, core: self, handler: { _, _, _ in changed() })
    }

    /// Whether `key`'s name can be observed; an invalid one is reported.
    private func isObservable(_ key: PersistentDefaults.Keys) -> Bool {
        do {
            try key.validate()
            return true
        } catch {
            reporter.report(error)
            return false
        }
    }

    /// Registers a key observer that gets decoded changes; see `PersistentDefaults.observe`.
    func observe<Value>(
        _ key: PersistentDefaults.Key<Value>, activity: ObserverRegistry.Activity = .init(),
        registered: ((Value) -> Void)?,
        deliver: @escaping @Sendable (KeyChange<Value>) -> Void
    ) -> ObservationToken {
        guard isObservable(key) else {
            registered?(key.defaultValue)
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
        // The start bytes are only copied under the registry lock; decoding them runs after it.
        var start: [UInt8]?
        let token = observers.addKeyObserver(
            name: key.nameBytes, core: self, activity: activity,
            handler: { old, new, sequence in
                guard let newValue = decode(new) else { return }
                let change = KeyChange(
                    key: key.name, oldValue: decode(old) ?? key.defaultValue, newValue: newValue, sequence: sequence)
                deliver(change)
            },
            registered: { start = $0 })
        if let registered { registered(decode(start) ?? key.defaultValue) }
        return token
    }
}
