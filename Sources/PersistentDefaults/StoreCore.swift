import Dispatch
import Foundation
import Synchronization

/// The named LMDB databases of a store.
struct Databases: Sendable {
    /// Key name → stored value.
    var values: DatabaseHandle
    /// Sequence number (8 bytes big-endian) → commit record.
    var log: DatabaseHandle
    /// Store facts such as the format version.
    var meta: DatabaseHandle

    static let valuesName = "values"
    static let logName = "log"
    static let metaName = "meta"
    /// Meta key holding the format version as 4 bytes big-endian.
    static let formatVersionKey = Array("format-version".utf8)
}

/// What every handle of one store path in this process shares: the environment, the database
/// handles, the error reporter and the background flusher.
@usableFromInline
final class StoreCore: Sendable {
    /// The on-disk format this library writes and the newest it reads.
    static let formatVersion: UInt32 = 1

    let path: String
    let options: PersistentDefaults.Options
    let environment: Environment
    let databases: Databases
    let reporter: ErrorReporter
    /// `options.maxValueSize`, at least 1, read on every write.
    let maxValueSize: Int
    private let flusher: Flusher?
    /// Coalesces concurrent single-key writes in `.sync` mode.
    let groupCommit = GroupCommit()
    /// The observers of this store in this process.
    let observers = ObserverRegistry()
    /// The Observation-framework trackers of keys read through property wrappers, by the key
    /// name's UTF-8 bytes (a key name is its bytes; `String` equality would merge NFC and NFD).
    let trackers = Locked<[[UInt8]: KeyTracker]>([:])

    /// Whether the store's directory is removed when it closes (a temporary store).
    let isTemporary: Bool

    init(path: String, options: PersistentDefaults.Options, temporary: Bool = false) throws {
        self.path = path
        isTemporary = temporary
        self.options = options
        reporter = ErrorReporter(handler: options.errorHandler)
        maxValueSize = max(options.maxValueSize, 1)
        let files = try StoreFiles.prepare(path: path, creating: options.creates)
        let noSync: Bool =
            if case .bounded = options.durability { true } else { false }
        environment = try Environment(
            EnvironmentConfiguration(
                path: path, readOnly: options.readOnly, noSync: noSync,
                mapSize: max(options.initialMapSize, 64 << 10), maxReaders: options.maxReaders))
        if files.createdData { try StoreFiles.restrictModes(in: path) }
        do {
            databases = try Self.openDatabases(
                environment, path: path, readOnly: options.readOnly, creating: options.creates)
            // With MDB_NOSYNC LMDB syncs nothing by itself, so a store created by this open would
            // stay unsynced until the flusher's first interval, and a power cut in that window
            // leaves an empty or half-built file (`tools/power-cut`: 476 of 802 damaged
            // `.bounded` stores were cut before their first sync). The creation is synced now.
            if noSync, environment.localCommits.load(ordering: .acquiring) > 0 { try environment.sync() }
        } catch {
            environment.close()
            throw error
        }
        if case .bounded(let interval) = options.durability, !options.readOnly {
            flusher = Flusher(environment: environment, interval: interval, reporter: reporter)
        } else {
            flusher = nil
        }
    }

    /// Flushes and closes; the last handle of the path calls this.
    func close() {
        trackers.withLock { $0.removeAll() }
        observers.close()
        flusher?.stop()
        environment.close()
        if isTemporary { TemporaryStores.remove(path) }
    }

    private static func openDatabases(_ environment: Environment, path: String, readOnly: Bool, creating: Bool) throws
        -> Databases
    {
        try environment.withSetup(write: !readOnly) { transaction in
            guard let meta = try transaction.openDatabase(Databases.metaName, create: false) else {
                // Without `creating`, an environment that another process emptied or replaced
                // between the file checks and the open is refused here, not initialised.
                guard creating, try transaction.isEmptyEnvironment() else {
                    throw PersistentDefaultsError.notAStore(
                        path: path, reason: "the LMDB environment has no \"\(Databases.metaName)\" database")
                }
                return try initialize(transaction)
            }
            let version: UInt32? = try Databases.formatVersionKey.withUnsafeBytes { key in
                try transaction.withValue(meta, key) { bytes in
                    guard let bytes, bytes.count == 4 else { return nil }
                    return UInt32(bigEndianBytes: bytes)
                }
            }
            guard let version else {
                throw PersistentDefaultsError.notAStore(
                    path: path, reason: "the format version is missing or malformed")
            }
            guard version <= formatVersion else {
                throw PersistentDefaultsError.unsupportedFormatVersion(found: version, supported: formatVersion)
            }
            guard let values = try transaction.openDatabase(Databases.valuesName, create: false),
                let log = try transaction.openDatabase(Databases.logName, create: false)
            else {
                throw PersistentDefaultsError.notAStore(path: path, reason: "the values or log database is missing")
            }
            return Databases(values: values, log: log, meta: meta)
        }
    }

    private static func initialize(_ transaction: Transaction) throws -> Databases {
        func create(_ name: String) throws -> DatabaseHandle {
            guard let handle = try transaction.openDatabase(name, create: true) else {
                throw PersistentDefaultsError.lmdb(code: .notFound, operation: "mdb_dbi_open(\(name))")
            }
            return handle
        }
        let databases = Databases(
            values: try create(Databases.valuesName), log: try create(Databases.logName),
            meta: try create(Databases.metaName))
        var version = ByteWriter()
        version.append(formatVersion)
        try Databases.formatVersionKey.withUnsafeBytes { key in
            try version.bytes.withUnsafeBytes { try transaction.put(databases.meta, key, $0) }
        }
        return databases
    }

    // MARK: Writing

    /// Runs `body` in one write transaction, logs the changes it made and, after the commit,
    /// delivers them to the observers. Nothing is written when `body` throws.
    func write<R>(sizeHint: Int = 0, _ body: (WriteTransaction) throws -> R) throws -> R {
        let (result, record) = try commit(sizeHint: sizeHint, body)
        if let record { observers.didCommit(record, core: self) }
        return result
    }

    /// `write`, without the delivery: returns the commit's log record (nil when nothing
    /// changed) for the caller to deliver once it holds no lead or lock.
    func commit<R>(sizeHint: Int = 0, _ body: (WriteTransaction) throws -> R) throws -> (R, CommitRecord?) {
        var committed: CommitRecord?
        let result = try environment.withWrite(sizeHint: sizeHint) { transaction in
            let writer = WriteTransaction(core: self, transaction: transaction)
            defer { writer.invalidate() }
            let result = try body(writer)
            committed = try writer.finish()
            return result
        }
        flusher?.markDirty()
        return (result, committed)
    }

    /// Appends `changes` as the next record and prunes the oldest records past either bound of
    /// the retention: more than `logRetention` records, or more than `logRetentionBytes` of pages
    /// in the log database. The new record is always kept. Throws
    /// ``PersistentDefaultsError/corruptLogRecord(sequence:reason:)`` when a log key on the way
    /// is not a sequence number: the write fails instead of trapping or reusing a number.
    func appendLog(_ changes: [CommitRecord.Change], in transaction: Transaction) throws -> CommitRecord {
        let last = try lastSequence(in: transaction)
        guard last < validSequences.upperBound else {
            throw PersistentDefaultsError.corruptLogRecord(
                sequence: last, reason: "no sequence number follows \(last), the largest the log may hold")
        }
        let record = CommitRecord(sequence: last + 1, timestamp: Date(), processID: getpid(), changes: changes)
        let encoded = record.encoded
        transaction.noteLogged(
            sequence: record.sequence, mask: changes.reduce(0) { $0 | WakeChannel.bit(forKeyNamed: $1.key.utf8) })
        try sequenceKey(record.sequence).withUnsafeBytes { key in
            try encoded.withUnsafeBytes { try transaction.put(databases.log, key, $0) }
        }
        let retention = UInt64(max(options.logRetention, 1))
        let cutoff = record.sequence > retention ? record.sequence - retention : 0
        let byteBound = max(options.logRetentionBytes, 0)
        // The size is what the log's B-tree and overflow pages take in data.mdb, from
        // `mdb_stat`, which copies the counters LMDB keeps in the transaction's database record
        // (mdb.c, mdb_stat0): O(1), no scan, exact also after other processes' commits, and
        // nothing new in the file format. Deleting a record frees its overflow pages at once,
        // so the counters drop as the loop deletes; small records free a leaf page every few
        // dozen deletions. In the common case (the bound not reached) this is one mdb_stat.
        var overBytes = try logBytes(in: transaction) > byteBound
        guard cutoff > 0 || overBytes else { return record }
        try transaction.deleteLeading(databases.log) { key in
            let sequence = try logSequence(fromKey: key)
            guard sequence < record.sequence else { return false }
            if sequence <= cutoff { return true }
            // Measured before each deletion past the count bound: the previous one may have
            // brought the log under the byte bound.
            if overBytes { overBytes = try logBytes(in: transaction) > byteBound }
            return overBytes
        }
        return record
    }

    /// The bytes of the pages that the log database takes (`mdb_stat`: branch, leaf and
    /// overflow pages times the page size).
    func logBytes(in transaction: Transaction) throws -> Int {
        let statistics = try transaction.statistics(databases.log)
        return statistics.pageSize * (statistics.branchPages + statistics.leafPages + statistics.overflowPages)
    }

    // MARK: Reading

    /// Decodes `key`'s value in `transaction`, or its default when it is not stored.
    func value<Value>(_ key: PersistentDefaults.Key<Value>, in transaction: Transaction) throws -> Value {
        try key.validate()
        return try key.nameBytes.withUnsafeBytes { name in
            try transaction.withValue(databases.values, name) { bytes in
                guard let bytes else { return key.defaultValue }
                return try key.decode(bytes)
            }
        }
    }

    /// Reads `key`'s stored bytes in a read transaction of its own and passes them (nil when the
    /// key is not stored) to `body`, which runs exactly once unless this throws; the bytes are
    /// valid only inside `body`. Not generic: the public typed reads wrap it in `@inlinable`
    /// code that the caller's module specialises.
    @usableFromInline
    func readValue(of key: PersistentDefaults.Keys, _ body: (UnsafeRawBufferPointer?) throws -> Void) throws {
        try key.validate()
        // The closure captures only trivial values: capturing `self` would retain the core, an
        // atomic write to a line that every reading thread shares.
        let name = key.nameBuffer
        let values = databases.values
        try environment.withRead { transaction in try transaction.withValue(values, name, body) }
    }

    /// `value(_:in:)`, but a failure is reported and the default returned.
    func valueOrDefault<Value>(_ key: PersistentDefaults.Key<Value>, in transaction: Transaction) -> Value {
        do {
            return try value(key, in: transaction)
        } catch {
            reporter.reportOnce(error)
            return key.defaultValue
        }
    }

    /// The stored bytes of `name`, copied.
    func encodedValue(named name: [UInt8], in transaction: Transaction) throws -> [UInt8]? {
        try name.withUnsafeBytes { key in
            try transaction.withValue(databases.values, key) { $0.map { Array($0) } }
        }
    }

    /// The names of the stored keys, sorted by their bytes.
    func keyNames(in transaction: Transaction) throws -> [String] {
        var names: [String] = []
        try transaction.forEach(databases.values) { key, _ in
            names.append(String(decoding: key, as: UTF8.self))
            return true
        }
        return names
    }

    /// The records after `sequence`, oldest first, at most `limit`.
    func commits(after sequence: UInt64, limit: Int, in transaction: Transaction) throws -> [CommitRecord] {
        var records: [CommitRecord] = []
        guard limit > 0 else { return records }
        try forEachLogRecord(after: sequence, in: transaction) { _, record in
            records.append(try record.get())
            return records.count < limit
        }
        return records
    }

    /// Visits the log records after `sequence` in key order until `body` returns false, each as
    /// its sequence number (nil when the key is not one) and its decoded record or the error its
    /// key or bytes gave: strict readers throw it, delivery skips it.
    func forEachLogRecord(
        after sequence: UInt64, in transaction: Transaction,
        _ body: (_ number: UInt64?, _ record: Result<CommitRecord, PersistentDefaultsError>) throws -> Bool
    ) throws {
        guard sequence < .max else { return }
        try sequenceKey(sequence + 1).withUnsafeBytes { start in
            try transaction.forEach(databases.log, from: start) { key, value in
                let number = Result { () throws(PersistentDefaultsError) in try logSequence(fromKey: key) }
                let record = number.flatMap { number in
                    Result { () throws(PersistentDefaultsError) in try CommitRecord(sequence: number, bytes: value) }
                }
                return try body(try? number.get(), record)
            }
        }
    }
}

/// Passes errors to the handler; decoding failures only once per key and reason.
final class ErrorReporter: Sendable {
    private let handler: @Sendable (PersistentDefaultsError) -> Void
    /// The UTF-8 bytes of each reported message: `String` equality would take the message about
    /// an NFD key name for the one about its NFC form.
    private let reported = Locked<Set<[UInt8]>>([])

    init(handler: @escaping @Sendable (PersistentDefaultsError) -> Void) { self.handler = handler }

    func report(_ error: any Error) {
        handler(error as? PersistentDefaultsError ?? .unknown(description: "\(error)"))
    }

    func reportOnce(_ error: any Error) {
        let text = "\(error)"
        let isNew = reported.withLock { seen in
            guard seen.count < 10_000 else { return false }
            return seen.insert(Array(text.utf8)).inserted
        }
        if isNew { report(error) }
    }
}

/// Flushes a `bounded` store's commits to disk in the background and at a normal exit.
///
/// What needs flushing is read from `Environment.localCommits`, which every commit of this
/// process that changed pages advances (logged or not: store creation, migrations, `write { }`
/// that changed nothing logged), so a missed `markDirty()` can delay a flush, never lose one.
///
/// The timer is one-shot: `markDirty()`, called after every commit, arms it for `interval` later
/// unless it is armed already, so a commit is flushed at most `interval` after it returned, and
/// a store with nothing to flush wakes nobody (no timer runs while idle).
///
/// A store that is never released (a global, `PersistentDefaults.standard`) never reaches
/// `stop()`, so every live flusher is also listed for an `atexit` handler that syncs them all
/// when the process exits normally (return from `main`, `exit()`).
///
/// `@unchecked Sendable`: the dispatch queue is thread-safe and set up once in `init`; the
/// rest is `Atomic`s and Sendable references.
final class Flusher: @unchecked Sendable {
    private let environment: Environment
    private let reporter: ErrorReporter
    private let queue = DispatchQueue(label: "PersistentDefaults.flush")
    private let interval: DispatchTimeInterval
    /// `environment.localCommits` as of the last successful sync.
    private let syncedCommits = Atomic<Int>(0)
    /// Whether a flush is scheduled and has not yet read `localCommits`.
    private let armed = Atomic<Bool>(false)
    private let isStopped = Atomic<Bool>(false)
    /// Every flusher not yet stopped, for the exit handler. Held only to insert, remove or copy,
    /// never across I/O, so the exiting thread cannot wait on it for long.
    private static let live = Locked<[ObjectIdentifier: Flusher]>([:])
    /// Registers the exit handler once per process, on first use.
    private static let exitHandler: Void = {
        // Ignored on purpose: atexit fails only when its table is full; the timer and close
        // still flush, and `flush()` remains the caller's explicit guarantee.
        _ = atexit { Flusher.flushAllAtExit() }
    }()
    /// How long the exit handler waits for a store that another thread holds exclusively (a map
    /// growth or a close in progress) before it gives up on that store and lets the process exit.
    static let exitTimeout = 2.0

    init(environment: Environment, interval: Duration, reporter: ErrorReporter) {
        self.environment = environment
        self.reporter = reporter
        // Between 1 ms and one day: no overflow for absurd intervals, no busy loop for tiny ones.
        let seconds = min(max(interval / .seconds(1), 0.001), 86_400)
        self.interval = .nanoseconds(Int(seconds * 1e9))
        _ = Self.exitHandler
        Self.live.withLock { $0[ObjectIdentifier(self)] = self }
        markDirty()  // The store's creation, if this open made it.
    }

    /// Arms the timer unless it is armed. Sequentially consistent on both sides (with the
    /// commit counter's increment and `fire`'s load): a commit either finds the timer armed
    /// before it reads the counter, or arms the next one.
    func markDirty() {
        guard !armed.exchange(true, ordering: .sequentiallyConsistent) else { return }
        queue.asyncAfter(deadline: .now() + interval) { [weak self] in self?.fire() }
    }

    private func fire() {
        armed.store(false, ordering: .sequentiallyConsistent)
        guard !isStopped.load(ordering: .acquiring) else { return }
        flush()
    }

    private func flush() {
        let commits = environment.localCommits.load(ordering: .sequentiallyConsistent)
        guard commits != syncedCommits.load(ordering: .acquiring) else { return }
        do {
            try environment.sync()
            syncedCommits.store(commits, ordering: .releasing)
        } catch {
            reporter.report(error)
            markDirty()  // Try again an interval later.
        }
    }

    /// Stops the timer and flushes what is left.
    func stop() {
        Self.live.withLock { $0[ObjectIdentifier(self)] = nil }
        isStopped.store(true, ordering: .releasing)
        queue.sync { flush() }
    }

    /// The exit handler: syncs every store with unsynced commits. It runs on the exiting thread
    /// while other threads may still be writing; `mdb_env_sync` takes no LMDB lock, and the
    /// environment's gate is tried with a timeout (`exitTimeout`), so a thread that holds it
    /// exclusively cannot hang the exit. A commit that another thread completes after this sync
    /// was never acknowledged before the exit began.
    private static func flushAllAtExit() {
        let flushers = live.withLock { Array($0.values) }
        for flusher in flushers {
            let commits = flusher.environment.localCommits.load(ordering: .acquiring)
            guard commits != flusher.syncedCommits.load(ordering: .acquiring) else { continue }
            do {
                if try flusher.environment.syncAtExit(timeout: exitTimeout) {
                    flusher.syncedCommits.store(commits, ordering: .releasing)
                }
            } catch {
                flusher.reporter.report(error)
            }
        }
    }
}

extension StoreCore {
    /// Encodes `value` for `key`, as an error that names the key.
    func encode<Value>(_ value: Value, for key: PersistentDefaults.Key<Value>) throws(PersistentDefaultsError)
        -> [UInt8]
    {
        do {
            return try key.codec.encode(value)
        } catch {
            throw .encodingFailed(key: key.name, type: "\(Value.self)", reason: error.description)
        }
    }

    /// Throws ``PersistentDefaultsError/valueTooLarge(key:size:limit:)`` when `encoded` is larger
    /// than ``PersistentDefaults/Options/maxValueSize``.
    @inline(__always)
    func checkSize(_ encoded: [UInt8], of name: String) throws(PersistentDefaultsError) {
        if encoded.count > maxValueSize { throw .valueTooLarge(key: name, size: encoded.count, limit: maxValueSize) }
    }

    /// The stored value of `name`, untyped; nil when absent.
    func storedValue(named name: String, in transaction: Transaction) throws -> StoredValue? {
        let key = PersistentDefaults.Keys(name: name)
        try key.validate()
        return try key.nameBytes.withUnsafeBytes { nameBytes in
            try transaction.withValue(databases.values, nameBytes) { (bytes) -> StoredValue? in
                guard let bytes else { return nil }
                do throws(StoredValueError) {
                    return try StoredValue(encodedValue: bytes)
                } catch {
                    throw PersistentDefaultsError.decodingFailed(
                        key: name, type: "StoredValue", reason: error.description)
                }
            }
        }
    }
}
