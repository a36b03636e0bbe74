import Foundation

/// Makes a prefix of a store follow a prefix of etcd: every process keeps reading its settings
/// from LMDB, and a change made anywhere in the fleet reaches each host in etcd's order.
///
/// ```swift
/// extension PersistentDefaults.Keys {
///     static let maxConnections = Key<Int>("fleet.maxConnections", default: 100)
/// }
///
/// let store = try PersistentDefaults(path: "/var/lib/myservice/settings")
/// let mirror = try EtcdMirror(
///     store: store, endpoints: ["http://127.0.0.1:2379"],
///     etcdPrefix: "/fleet/myservice/", localPrefix: "fleet.")
/// try await mirror.start()                          // a consistent copy is applied
/// store[.maxConnections]                            // a local read
/// try await mirror.update(.maxConnections) { $0 + 1 } // compare-and-swap in etcd, retried
/// try await mirror.stop()
/// ```
///
/// The etcd key `<etcdPrefix><name>` is the local key `<localPrefix><name>`; its value in etcd is
/// the typed JSON form of one value, `{"type":"int","value":300}` (see ``StoredValue`` and
/// `pdinspect export`), so an operator can write it with `etcdctl put`.
///
/// What it guarantees:
/// - **One etcd revision, one local commit**: the initial copy (at one revision, deleting local
///   mirrored keys that etcd no longer has) and each revision the watch delivers are applied in
///   one LMDB transaction each, which also records the revision in the store's `meta`; an
///   etcd transaction that changed several keys reaches observers as one commit.
/// - **Resume without loss or repeat**: a restart watches from the recorded revision on. The
///   applying transaction applies a revision only when it is newer than the recorded one, so
///   several processes mirroring one store apply each revision once. When etcd compacted past
///   the recorded revision, the prefix is read again and the difference applied in one commit;
///   so too when etcd's history went back (a member restarted without its data keeps its
///   cluster ID and starts its revisions over), which is also reported.
/// - **Ownership**: local names under `localPrefix` belong to the mirror (recorded in `meta` by
///   the initializer); any other write of them, in any process, throws
///   ``PersistentDefaultsError/ownedByMirror(key:localPrefix:etcdPrefix:)`` and writes nothing.
/// - **Faults**: the watch fails over between endpoints and reconnects with a growing pause;
///   while etcd is unreachable local reads keep the last values and ``state`` says
///   ``State/reconnecting(since:lastRevision:)``. A periodic consistency check (etcd 3.4's
///   watch can drop events) compares the local copy with etcd at the applied revision and
///   repairs a difference, reporting it through ``PersistentDefaults/Options/errorHandler``.
///
/// A value in etcd that does not parse is reported through the store's error handler and not
/// applied; the other keys of its revision are, and the key keeps its last good value. Until a
/// good value or a delete reaches the key in etcd, a write through the mirror that reads it
/// (``update(_:_:)``, a ``write(_:)`` body) throws ``EtcdMirrorError/unparsableValue(key:revision:)``
/// and sends nothing; ``set(_:for:)``, which reads nothing, replaces it.
public final class EtcdMirror: Sendable {
    /// Timing of the mirror's requests, reconnects and checks.
    public struct Options: Sendable {
        /// How long one call to etcd may take, over every endpoint and retry. Default 10 s.
        public var requestTimeout: Duration = .seconds(10)
        /// How long connecting to one endpoint may take. Default 2 s.
        public var connectTimeout: Duration = .seconds(2)
        /// The longest pause between reconnect attempts (the pause doubles from 50 ms). Default 2 s.
        public var maxBackoff: Duration = .seconds(2)
        /// How often the local copy is compared with etcd. Default 30 s.
        public var consistencyCheckInterval: Duration = .seconds(30)
        /// How often, at most, a successful contact with etcd is recorded in `meta` when no
        /// revision is applied (what `pdinspect stat` shows as last contact). Default 60 s.
        public var contactRecordInterval: Duration = .seconds(60)
        /// How long ``EtcdMirror/start()`` tries before it gives up. Default 30 s.
        public var startTimeout: Duration = .seconds(30)
        /// How often ``EtcdMirror/update(_:_:)`` and ``EtcdMirror/write(_:)`` try when keys they
        /// read change concurrently. Default 1,000.
        public var maxAttempts = 1_000

        /// The defaults.
        public init() {}
    }

    /// Where the mirror stands.
    public enum State: Sendable, Equatable {
        /// Created; ``EtcdMirror/start()`` not called yet.
        case idle
        /// ``EtcdMirror/start()`` is making the first consistent copy.
        case starting
        /// Following etcd; the local copy reflects `revision`.
        case live(revision: Int64)
        /// The watch lost etcd at `since`; local reads return the values of `lastRevision`.
        case reconnecting(since: Date, lastRevision: Int64)
        /// ``EtcdMirror/stop()`` was called.
        case stopped
    }

    /// The store whose prefix this mirror owns.
    public let store: PersistentDefaults
    /// The etcd keys mirrored start with this.
    public let etcdPrefix: String
    /// The local key names owned start with this.
    public let localPrefix: String
    /// The options given at creation.
    public let options: Options

    let client: EtcdClient
    let etcdPrefixBytes: [UInt8]
    let localPrefixBytes: [UInt8]
    let status = Locked(Status())
    let wake = WakeHandle()
    let stopSignal = StopSignal()
    /// Entered by the initial copy and each of the mirror's threads, left as each ends.
    let threadsDone = DispatchGroup()

    /// What the mirror's threads and callers share.
    struct Status: Sendable {
        var state = State.idle
        /// The newest revision known to be applied to the store (by this process or another).
        var applied: Int64 = 0
        /// The newest revision a progress notification said the watch had delivered.
        var progress: Int64 = 0
        /// Callers waiting until `applied` reaches a revision.
        var waiters: [Int: (revision: Int64, continuation: CheckedContinuation<Void, any Error>)] = [:]
        var nextWaiter = 0
        /// While `start()` catches up after a restart: etcd's state at the revision it must reach.
        var catchUp: CatchUp?
        /// The revision of the last catch-up: the local copy equalled etcd's state at it.
        var caughtUp: Int64 = 0
        /// When contact with etcd was last written to `meta`.
        var contactRecorded = ContinuousClock.now
        /// Whether `start()` began the mirror's work (the initial copy, then the threads), all
        /// counted in `threadsDone`: `stop()` then waits for it.
        var threadsStarted = false
        /// The index of the endpoint the watch uses or tries next.
        var watchEndpoint = 0
        /// Set by the consistency check when the watch's member seems to hang: the watch then
        /// ends its connection and moves to the next endpoint.
        var watchStalled = false
        /// Counts the times etcd's history went back (``EtcdMirror/noteHistoryWentBack(to:)``): a
        /// revision read from the store before then is not noted after.
        var epoch = 0
    }

    /// The etcd prefix read at `revision`, for `start()` to tell when the watch caught up.
    struct CatchUp: Sendable {
        var revision: Int64
        /// Local name bytes → the value bytes etcd held (values that do not parse left out).
        var values: [[UInt8]: [UInt8]]
        /// Local name bytes → the revision of an etcd value that does not parse or cannot be stored.
        var unparsable: [[UInt8]: Int64]
    }

    /// Creates a mirror and records in the store that it owns `localPrefix`.
    ///
    /// ```swift
    /// let mirror = try EtcdMirror(
    ///     store: store, endpoints: ["http://10.0.0.1:2379", "http://10.0.0.2:2379"],
    ///     etcdPrefix: "/fleet/myservice/", localPrefix: "fleet.")
    /// ```
    ///
    /// From then on, writes of keys under `localPrefix` that do not go through a mirror fail with
    /// ``PersistentDefaultsError/ownedByMirror(key:localPrefix:etcdPrefix:)``, in every process.
    /// Nothing is sent to etcd until ``start()``.
    ///
    /// Throws ``EtcdMirrorError/invalidEndpoint(_:reason:)`` for an endpoint that is not
    /// `http://HOST:PORT`, ``EtcdMirrorError/invalidPrefix(_:reason:)`` for an empty prefix or a
    /// local prefix that overlaps another mirror's or is owned with another etcd prefix, and the
    /// store's errors (a read-only store).
    public init(
        store: PersistentDefaults, endpoints: [String], etcdPrefix: String, localPrefix: String,
        options: Options = Options()
    ) throws {
        // The mirror writes through the store's core, which a read-only handle may share with a
        // writable one of this process: refused here, as the core refuses a read-only store.
        guard !store.isReadOnly else { throw PersistentDefaultsError.readOnly(path: store.path) }
        guard !etcdPrefix.isEmpty else {
            throw EtcdMirrorError.invalidPrefix(etcdPrefix, reason: "the etcd prefix is empty")
        }
        guard !localPrefix.isEmpty else {
            throw EtcdMirrorError.invalidPrefix(
                localPrefix, reason: "the local prefix is empty (it would own every key)")
        }
        guard localPrefix.utf8.count < PersistentDefaults.Keys.maximumNameLength - StoreCore.mirrorKeyPrefix.count
        else {
            throw EtcdMirrorError.invalidPrefix(localPrefix, reason: "the local prefix is too long")
        }
        client = try EtcdClient(
            endpoints: endpoints, requestTimeout: options.requestTimeout, connectTimeout: options.connectTimeout,
            maxBackoff: options.maxBackoff)
        self.store = store
        self.etcdPrefix = etcdPrefix
        self.localPrefix = localPrefix
        self.options = options
        etcdPrefixBytes = Array(etcdPrefix.utf8)
        localPrefixBytes = Array(localPrefix.utf8)
        try claimOwnership()
    }

    /// Records the ownership of `localPrefix` in `meta`, unless it is recorded already.
    private func claimOwnership() throws {
        let core = store.core
        let claim = { (transaction: Transaction) throws -> MirrorRecord? in
            var own: MirrorRecord?
            for entry in try core.mirroredPrefixes(in: transaction) {
                let record = try StoreCore.decodeMirrorRecord(entry.record, localPrefix: entry.localPrefix)
                if entry.localPrefix == self.localPrefixBytes {
                    guard record.etcdPrefix == self.etcdPrefix else {
                        throw EtcdMirrorError.invalidPrefix(
                            self.localPrefix,
                            reason: "it is owned by a mirror of etcd prefix \"\(record.etcdPrefix)\"")
                    }
                    own = record
                } else if entry.localPrefix.starts(with: self.localPrefixBytes)
                    || self.localPrefixBytes.starts(with: entry.localPrefix)
                {
                    throw EtcdMirrorError.invalidPrefix(
                        self.localPrefix,
                        reason: "it overlaps \"\(String(decoding: entry.localPrefix, as: UTF8.self))\", "
                            + "owned by a mirror of etcd prefix \"\(record.etcdPrefix)\"")
                }
            }
            return own
        }
        if let recorded = try core.environment.withRead(claim), recorded.endpoints == client.endpoints { return }
        try core.write { writer in
            let transaction = try writer.live()
            var record = try claim(transaction) ?? MirrorRecord(etcdPrefix: etcdPrefix, endpoints: client.endpoints)
            record.endpoints = client.endpoints
            try core.recordMirror(record, localPrefix: localPrefixBytes, in: transaction)
        }
    }

    /// Where the mirror stands: ``State/live(revision:)`` while it follows etcd.
    public var state: State { status.withLock { $0.state } }

    /// The newest etcd revision applied to the store.
    public var appliedRevision: Int64 { status.withLock { $0.applied } }

    // MARK: Start and stop

    /// Makes a consistent copy of the etcd prefix in the store, then follows etcd in the
    /// background until ``stop()``.
    ///
    /// ```swift
    /// try await mirror.start()
    /// ```
    ///
    /// The first start reads the prefix at one revision and applies it in one commit (removing
    /// local mirrored keys that etcd does not have). A later start (after a restart) watches from
    /// the revision recorded in the store and returns once the local copy equals etcd's state
    /// at the revision current when it was called. Throws ``EtcdMirrorError/unavailable(endpoints:reason:)``
    /// when no endpoint answers within ``Options/startTimeout``.
    public func start() async throws {
        try status.withLock { status in
            guard status.state == .idle else { throw EtcdMirrorError.notRunning }
            status.state = .starting
            // The initial copy counts as the mirror's work, which `stop()` waits for: a stop
            // during the copy must not return before it (it committed to the store after).
            status.threadsStarted = true
            threadsDone.enter()
        }
        do {
            let target: Int64
            do {
                target = try await EtcdClient.offThread { try self.initialCopy() }
            } catch {
                threadsDone.leave()
                throw error
            }
            // The threads join the group before the copy leaves it: a stop never finds it empty
            // between the two.
            startThreads()
            threadsDone.leave()
            try await waitUntilApplied(target, timeout: options.startTimeout)
            try status.withLock { status in
                switch status.state {
                case .starting: status.state = .live(revision: status.applied)
                // The watch lost its member during the catch-up: it is reconnecting, or it has.
                case .reconnecting, .live: break
                case .idle, .stopped: throw EtcdMirrorError.notRunning  // Stopped meanwhile.
                }
            }
        } catch {
            try? await stop()
            throw error
        }
    }

    /// Stops following etcd. The local copy keeps the last values, still owned by the mirror
    /// (a new mirror of the same prefixes resumes after the recorded revision).
    ///
    /// Returns once the mirror's work has ended — its threads, and the initial copy of a
    /// ``start()`` in progress (which then throws ``EtcdMirrorError/notRunning``): nothing is
    /// written to the store after it returns.
    ///
    /// A started mirror runs until this is called: its threads keep it alive, so releasing the
    /// last reference does not stop it.
    public func stop() async throws {
        let (waiters, started) = status.withLock { status in
            status.state = .stopped
            defer { status.waiters.removeAll() }
            return (Array(status.waiters.values), status.threadsStarted)
        }
        stopSignal.raise()
        wake.wake()
        for waiter in waiters { waiter.continuation.resume(throwing: EtcdMirrorError.notRunning) }
        guard started else { return }
        let group = threadsDone
        try await EtcdClient.offThread { group.wait() }
    }

    // MARK: Writing

    /// Stores `value` for `key` in etcd and returns once the mirror applied it locally.
    ///
    /// ```swift
    /// try await mirror.set(200, for: .maxConnections)
    /// ```
    ///
    /// A value the key's hooks remove (`nil` of an optional key, `shouldRemove`) deletes the etcd
    /// key. Throws ``EtcdMirrorError/keyOutsidePrefix(key:localPrefix:)`` for a key that this
    /// mirror does not own. It reads nothing, so it also replaces an etcd value that does not
    /// parse (how code repairs one).
    public func set<Value>(_ value: Value, for key: PersistentDefaults.Key<Value>) async throws {
        try await write { $0.setValue(value, for: key) }
    }

    /// Reads the key's local value, applies `transform` and writes the result to etcd if the key
    /// did not change in etcd since that value (a compare-and-swap on its `mod_revision`);
    /// otherwise waits for the newer value to arrive locally and tries again.
    ///
    /// ```swift
    /// try await mirror.update(.maxConnections) { $0 + 1 }   // two hosts × 100 calls: exactly +200
    /// ```
    ///
    /// Throws ``EtcdMirrorError/unparsableValue(key:revision:)``, sending nothing, while the key's
    /// value in etcd does not parse: the local value is then the last good one, not etcd's.
    public func update<Value>(_ key: PersistentDefaults.Key<Value>, _ transform: (Value) throws -> Value) async throws {
        try await write { transaction in
            transaction.setValue(try transform(try transaction.value(for: key)), for: key)
        }
    }

    /// Runs `body` against the local copy and writes what it set as one etcd transaction that
    /// succeeds only if no key it read changed in etcd since; retried on conflict. Returns once
    /// the mirror applied the transaction locally: every host sees it as one commit.
    ///
    /// ```swift
    /// try await mirror.write { tx in
    ///     tx[.maxConnections] = 300
    ///     tx[.banner] = "maintenance at 22:00"
    /// }
    /// ```
    ///
    /// etcd accepts at most 128 comparisons and 128 writes in a transaction (its default
    /// `--max-txn-ops`): `body` may set up to 128 keys and read up to 64 that exist (each costs two
    /// comparisons; one that does not exist costs one). Beyond that this throws
    /// ``EtcdMirrorError/tooManyOperations(count:limit:)`` and sends nothing.
    ///
    /// `body` may run several times; keep it free of other effects. Reading a key whose value in
    /// etcd does not parse throws ``EtcdMirrorError/unparsableValue(key:revision:)`` there, and
    /// the write sends nothing.
    public func write(_ body: (EtcdMirrorTransaction) throws -> Void) async throws {
        switch state {
        case .live, .reconnecting: try await writeAttempts(body)
        default: throw EtcdMirrorError.notRunning
        }
    }

    private func writeAttempts(_ body: (EtcdMirrorTransaction) throws -> Void) async throws {
        for attempt in 1...max(options.maxAttempts, 1) {
            let transaction = try store.read { snapshot in
                let transaction = try EtcdMirrorTransaction(mirror: self, snapshot: snapshot)
                defer { transaction.snapshot = nil }
                try body(transaction)
                return transaction
            }
            let request = try transaction.request()
            guard !request.success.isEmpty else { return }
            let limit = 128
            guard request.success.count <= limit, request.compare.count <= limit else {
                throw EtcdMirrorError.tooManyOperations(
                    count: max(request.success.count, request.compare.count), limit: limit)
            }
            let client = self.client
            let response = try await EtcdClient.offThread { try client.txn(request) }
            if response.succeeded {
                if response.changedKeys {
                    try await waitUntilApplied(response.header.revision, timeout: options.requestTimeout)
                } else {
                    // Every operation deleted a key etcd did not have: etcd made no revision, and
                    // the one in the answer, its newest, may belong to another prefix, which this
                    // watch never delivers.
                    try await waitUntilAbsent(request.success, timeout: options.requestTimeout)
                }
                return
            }
            // A key read changed after the revision it was read at: wait for a change of the
            // prefix after that revision to be applied here, then read and try again (until the
            // one that conflicted is); past a few conflicts, also pause a little. Not for etcd's
            // newest revision, in the answer: it may belong to another prefix, which this watch
            // never delivers (only a progress notification, every 10 minutes by default, would).
            try await waitUntilApplied(
                min(response.header.revision, transaction.revision + 1), timeout: options.requestTimeout)
            if attempt > 3 { try await Task.sleep(for: .milliseconds(Int.random(in: 0...min(attempt, 20)))) }
        }
        throw EtcdMirrorError.tooManyConflicts(attempts: max(options.maxAttempts, 1))
    }

    // MARK: Waiting for revisions

    /// Returns once the store holds `revision` (or a later one); throws
    /// ``EtcdMirrorError/notAppliedLocally(revision:)`` after `timeout`.
    func waitUntilApplied(_ revision: Int64, timeout: Duration) async throws {
        let id: Int? = status.withLock { status in
            guard max(status.applied, status.caughtUp) < revision else { return nil }
            status.nextWaiter += 1
            return status.nextWaiter
        }
        guard let id else { return }
        let timer = Task { [weak self] in
            try await Task.sleep(for: timeout)
            self?.resumeWaiter(id, throwing: EtcdMirrorError.notAppliedLocally(revision: revision))
        }
        defer { timer.cancel() }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let outcome: Result<Void, any Error>? = status.withLock { status in
                if status.state == .stopped { return .failure(EtcdMirrorError.notRunning) }
                if max(status.applied, status.caughtUp) >= revision { return .success(()) }
                status.waiters[id] = (revision, continuation)
                return nil
            }
            if let outcome { continuation.resume(with: outcome) }
        }
    }

    /// Returns once none of the keys that `operations` delete is in the local copy (a deletion
    /// etcd made before may not be applied here yet); throws
    /// ``EtcdMirrorError/notAppliedLocally(revision:)`` after `timeout`.
    private func waitUntilAbsent(_ operations: [EtcdOperation], timeout: Duration) async throws {
        let names = operations.compactMap { operation -> [UInt8]? in
            if case .delete(let key) = operation { localName(ofEtcdKey: key) } else { nil }
        }
        let deadline = ContinuousClock.now + timeout
        while true {
            let applied = appliedRevision
            let present = try store.core.environment.withRead { transaction in
                try names.contains { try store.core.encodedValue(named: $0, in: transaction) != nil }
            }
            guard present else { return }
            try await waitUntilApplied(applied + 1, timeout: deadline - .now)
        }
    }

    private func resumeWaiter(_ id: Int, throwing error: any Error) {
        let waiter = status.withLock { $0.waiters.removeValue(forKey: id) }
        waiter?.continuation.resume(throwing: error)
    }

    /// Notes that the store holds `revision`, and resumes the callers waiting for it. `epoch`:
    /// the ``Status/epoch`` when the caller read `revision` from the store, when another thread
    /// of the mirror may have noted since that etcd's history went back.
    func noteApplied(_ revision: Int64, epoch: Int? = nil) {
        let ready = status.withLock { status -> [CheckedContinuation<Void, any Error>] in
            if let epoch, epoch != status.epoch { return [] }
            status.applied = max(status.applied, revision)
            if case .live = status.state { status.state = .live(revision: status.applied) }
            let consistent = max(status.applied, status.caughtUp)
            let ready = status.waiters.filter { $0.value.revision <= consistent }
            for id in ready.keys { status.waiters[id] = nil }
            return ready.values.map(\.continuation)
        }
        for continuation in ready { continuation.resume() }
    }

    /// Notes that etcd's history went back and the store holds `revision` of the new one: unlike
    /// ``noteApplied(_:epoch:)``, the revision noted may go down. Every waiter is resumed: the
    /// local copy equals etcd's newest state, and the revision a waiter waits for may belong to
    /// the history that is gone (never to come, or another change under the same number).
    func noteHistoryWentBack(to revision: Int64) {
        let waiters = status.withLock { status in
            status.epoch += 1
            status.applied = revision
            status.progress = revision
            status.caughtUp = revision
            status.catchUp = nil
            if case .live = status.state { status.state = .live(revision: revision) }
            defer { status.waiters.removeAll() }
            return Array(status.waiters.values)
        }
        for waiter in waiters { waiter.continuation.resume() }
    }

    // MARK: Names

    /// The local name of an etcd key under the prefix; nil for a key outside it.
    func localName(ofEtcdKey key: Data) -> [UInt8]? {
        guard key.starts(with: etcdPrefixBytes) else { return nil }
        return localPrefixBytes + key.dropFirst(etcdPrefixBytes.count)
    }

    /// The local key of a name that ``localName(ofEtcdKey:)`` gave. Throws
    /// ``PersistentDefaultsError/invalidKeyName(_:reason:)`` for a name that cannot be stored —
    /// also for one that is not UTF-8: a key name is its UTF-8 bytes, and repairing them into
    /// U+FFFD would store another name, the same for several etcd keys, that never matches etcd.
    func localKey(named name: [UInt8]) throws(PersistentDefaultsError) -> PersistentDefaults.Keys {
        guard let text = String(validating: name, as: UTF8.self) else {
            throw .invalidKeyName(String(decoding: name, as: UTF8.self), reason: "the etcd key is not UTF-8")
        }
        let key = PersistentDefaults.Keys(name: text)
        try key.validate()
        return key
    }

    /// The etcd key of a local name under the local prefix; nil for a name outside it.
    func etcdKey(ofLocalName name: [UInt8]) -> Data? {
        guard name.starts(with: localPrefixBytes) else { return nil }
        return Data(etcdPrefixBytes + name.dropFirst(localPrefixBytes.count))
    }
}
