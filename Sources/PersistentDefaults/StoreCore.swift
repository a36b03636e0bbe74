import Dispatch
import Foundation
import Synchronization

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
    /// The store observations behind the Observation tracking of keys read through property
    /// wrappers, by the key name's UTF-8 bytes (a key name is its bytes; `String` equality
    /// would merge NFC and NFD), each while a wrapper's tracker of its name lives (see
    /// `KeyTracker`).
    let trackedNames = Locked<[[UInt8]: TrackedName]>([:])
    /// Runs when the last tracker of a key name is gone, after its observation left the table
    /// and before it is cancelled, with no lock held; for tests that make a wrapper of the same
    /// name at that moment. Nil, its normal state, costs one lock section per such release.
    let beforeObservationStop = Locked<(@Sendable () -> Void)?>(nil)
    /// What this process's newest logged commit left for the next write transaction.
    let commitCache = Locked<CommitCache?>(nil)
    /// The keys touched and value bytes held by the last write transaction that finished
    /// (capped), for the next one to size its tables when they grow (see `WriteTransaction.init`).
    private let lastWriteKeys = Atomic<Int>(0)
    private let lastWriteBytes = Atomic<Int>(0)

    /// The size hint for a new write transaction: the last finished one's keys and value bytes.
    var writeSizeHint: (keys: Int, bytes: Int) {
        (lastWriteKeys.load(ordering: .relaxed), lastWriteBytes.load(ordering: .relaxed))
    }

    /// Whether the store's directory is removed when it closes (a temporary store).
    let isTemporary: Bool

    /// `createdDirectories`: the directories whose entries the open changed when it made the
    /// store's directory (`StoreFiles.canonicalPath(_:creating:noting:)`), synced with the store
    /// directory once the store exists.
    init(
        path: String, options: PersistentDefaults.Options, temporary: Bool = false, createdDirectories: [String] = []
    ) throws {
        self.path = path
        isTemporary = temporary
        self.options = options
        maxValueSize = max(options.maxValueSize, 1)
        let files = try StoreFiles.prepare(path: path, creating: options.creates)
        let noSync: Bool =
            if case .bounded = options.durability { true } else { false }
        environment = try Environment(
            EnvironmentConfiguration(
                path: path, readOnly: options.readOnly, noSync: noSync,
                mapSize: max(options.initialMapSize, 64 << 10), maxReaders: options.maxReaders,
                readerSlotWait: max(options.readerSlotWait, .zero)))
        reporter = ErrorReporter(handler: options.errorHandler)
        if files.createdData { try StoreFiles.restrictModes(in: path) }
        do {
            databases = try Self.openDatabases(
                environment, path: path, readOnly: options.readOnly, creating: options.creates)
            // With MDB_NOSYNC LMDB syncs nothing by itself, so a store created by this open would
            // stay unsynced until the flusher's first interval, and a power cut in that window
            // leaves an empty or half-built file (`tools/power-cut`: 476 of 802 damaged
            // `.bounded` stores were cut before their first sync). The creation is synced now.
            if noSync, environment.localCommits.load(ordering: .acquiring) > 0 { try environment.sync() }
            // The new files' and directories' entries, which syncing `data.mdb` does not make
            // durable (fsync(2): "Calling fsync() does not necessarily ensure that the entry in
            // the directory containing the file has also reached disk"): without this a power cut
            // after the first `.sync` commit returned could lose the whole store. Once, at the
            // creation; a temporary store is removed at its close, so it is left out.
            if !temporary {
                var directories = files.createdData ? [path] : []
                for directory in createdDirectories where !directories.contains(directory) {
                    directories.append(directory)
                }
                for directory in directories { try StoreFiles.syncDirectory(directory) }
            }
        } catch {
            environment.close()
            throw error
        }
        // Only once the directory holds a store this library reads: a refused open adds no file.
        environment.attachWakeChannel()
        if case .bounded(let interval) = options.durability, !options.readOnly {
            flusher = Flusher(environment: environment, interval: interval, reporter: reporter)
        } else {
            flusher = nil
        }
    }

    /// Flushes and closes; the last handle's release calls this with the store's directory
    /// marked busy in the store registry, which keeps an open of the same store out until the
    /// environment is closed.
    ///
    /// Returns what the caller runs once the directory is no longer busy: cancelling the wrappers'
    /// observations and ending the `updates` streams. Ending a stream runs its termination
    /// handler, which cancels its observer and lets go of what that holds — the key, its default,
    /// user values whose `deinit` may open or close stores (while the directory is busy, an open
    /// of this store would wait for its own thread for ever) or do anything else.
    func close() -> () -> Void {
        let tracked = trackedNames.withLock { names in
            defer { names = [:] }
            return names
        }
        let streamEnds = observers.close()
        flusher?.stop()
        environment.close()
        if isTemporary { TemporaryStores.remove(path) }
        return {
            for entry in tracked.values { entry.observation.stop() }
            for end in streamEnds { end() }
        }
    }

    private static func openDatabases(_ environment: Environment, path: String, readOnly: Bool, creating: Bool) throws
        -> Databases
    {
        // A store that exists opens in a read transaction, also for writing: a write transaction
        // would wait for LMDB's writer lock, that is for any other process's write to end (a 10 s
        // transaction elsewhere held the open 10 s; when opens ran under the registry's lock, it
        // held every open and close in this process with it).
        if !readOnly {
            do {
                let existing = try environment.withSetup(write: false) { transaction in
                    try transaction.openDatabase(Databases.metaName, create: false).map {
                        try existingDatabases(meta: $0, in: transaction, path: path)
                    }
                }
                if let existing { return existing }
            } catch PersistentDefaultsError.lmdb(let code, _) where code.rawValue == EAGAIN || code == .readersFull {
                // This process cannot read, but it can still write: the write transaction below,
                // which takes no reader slot, opens the store as before. EAGAIN: LMDB marks a
                // reading process live with a lock on the byte at its process ID in `lock.mdb`,
                // and a process with the same ID in another PID namespace (a container's process
                // 1) holds it. readersFull: other processes' reads hold every slot of the reader
                // table (`aWritableOpenSucceedsWhileOtherProcessesHoldEveryReaderSlot`).
            }
        }
        return try environment.withSetup(write: !readOnly) { transaction in
            guard let meta = try transaction.openDatabase(Databases.metaName, create: false) else {
                // Without `creating`, an environment that another process emptied or replaced
                // between the file checks and the open is refused here, not initialised.
                guard creating, try transaction.isEmptyEnvironment() else {
                    throw PersistentDefaultsError.notAStore(
                        path: path, reason: "the LMDB environment has no \"\(Databases.metaName)\" database")
                }
                // This open makes the store: the channel's file exists before anyone can open it.
                environment.attachWakeChannel()
                return try initialize(transaction)
            }
            return try existingDatabases(meta: meta, in: transaction, path: path)
        }
    }

    /// The databases of a store whose `meta` database exists, once its format version is one
    /// this library reads.
    private static func existingDatabases(meta: DatabaseHandle, in transaction: Transaction, path: String) throws
        -> Databases
    {
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
        // Versions start at 1: a 0 was never written by any library, so the store is not one.
        guard version >= 1 else {
            throw PersistentDefaultsError.notAStore(
                path: path, reason: "the format version is 0, which no version of the format has")
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
        // Errors reported inside the transaction reach the handler now that it has ended.
        defer { reporter.deliverDeferred() }
        let (result, record) = try commit(sizeHint: sizeHint, body)
        if let record { observers.didCommit(record, core: self) }
        return result
    }

    /// `write`, without the delivery: returns the commit's log record (nil when nothing
    /// changed) for the caller to deliver once it holds no lead or lock. The caller also passes
    /// the errors reported inside the transaction to the handler then
    /// (`reporter.deliverDeferred()`).
    func commit<R>(sizeHint: Int = 0, _ body: (WriteTransaction) throws -> R) throws -> (R, CommitRecord?) {
        var committed: CommitRecord?
        var carried: CommitCache?
        // `body` runs again when the map had to grow: the errors a run reported go with it.
        let reportMark = reporter.pendingMark()
        var runs = 0
        let result = try environment.withWrite(sizeHint: sizeHint) { transaction in
            runs += 1
            if runs > 1 { reporter.discardReports(since: reportMark) }
            let id = transaction.id
            let cache = commitCache.withLock { $0 }.flatMap { $0.isValid(inTransaction: id) ? $0 : nil }
            let writer = WriteTransaction(core: self, transaction: transaction, cache: cache)
            defer { writer.invalidate() }
            let result = try body(writer)
            committed = try writer.finish()
            let size = writer.size
            lastWriteKeys.store(min(size.keys, 1 << 16), ordering: .relaxed)
            lastWriteBytes.store(min(size.bytes, 4 << 20), ordering: .relaxed)
            carried = committed.map { record in
                CommitCache(
                    transactionID: id, lastSequence: record.sequence,
                    // Owners read before this transaction wrote `meta` may be stale.
                    mirrorOwners: transaction.wrote(databases.meta) ? nil : writer.mirrorOwners)
            }
            return result
        }
        // Only after the commit succeeded: a transaction that failed to commit must never be
        // taken for the last one (another process may commit that transaction ID instead).
        if let carried {
            commitCache.withLock { cache in
                // A slower thread must not put back an older commit's facts.
                if (cache?.transactionID ?? .min) < carried.transactionID { cache = carried }
            }
        }
        flusher?.markDirty()
        return (result, committed)
    }

    /// Appends `changes` as the next record and prunes the log in batches (see `pruneLog`).
    /// Throws ``PersistentDefaultsError/corruptLogRecord(sequence:reason:)`` when a log key on
    /// the way is not a sequence number: the write fails instead of trapping or reusing a number.
    ///
    /// `cachedLastSequence` is the newest sequence as this process's previous commit left it,
    /// when that commit is the store's last one (see `CommitCache`); else the log is read.
    /// `mask`: the wake-up bits of the changed names (`WakeChannel.bit`), which the caller hashes
    /// from the names' bytes it holds.
    func appendLog(
        _ changes: EncodedChanges, mask: UInt64, cachedLastSequence: UInt64? = nil, in transaction: Transaction
    ) throws -> CommitRecord {
        try appendLog(mask: mask, cachedLastSequence: cachedLastSequence, in: transaction) {
            CommitRecord(sequence: $0, timestamp: $1, processID: CurrentProcess.id, encoded: changes)
        }
    }

    /// `appendLog` of changes held as values.
    func appendLog(
        _ changes: [CommitRecord.Change], mask: UInt64, cachedLastSequence: UInt64? = nil, in transaction: Transaction
    ) throws -> CommitRecord {
        try appendLog(mask: mask, cachedLastSequence: cachedLastSequence, in: transaction) {
            CommitRecord(sequence: $0, timestamp: $1, processID: CurrentProcess.id, changes: changes)
        }
    }

    /// Appends the record `makeRecord` makes of the next sequence and the commit's time.
    private func appendLog(
        mask: UInt64, cachedLastSequence: UInt64?, in transaction: Transaction,
        _ makeRecord: (_ sequence: UInt64, _ timestamp: Date) -> CommitRecord
    ) throws -> CommitRecord {
        let last = try cachedLastSequence ?? lastSequence(in: transaction)
        guard last < validSequences.upperBound else {
            throw PersistentDefaultsError.corruptLogRecord(
                sequence: last, reason: "no sequence number follows \(last), the largest the log may hold")
        }
        // At the log's resolution (whole microseconds), as every reader of the log sees it: the
        // record this process delivers must equal the one other processes read.
        let micros = (Date().timeIntervalSince1970 * 1_000_000).rounded()
        let record = makeRecord(last + 1, Date(timeIntervalSince1970: micros / 1_000_000))
        transaction.noteLogged(sequence: record.sequence, mask: mask)
        try withUnsafeBytes(of: record.sequence.bigEndian) { key in
            try transaction.put(databases.log, key, reserving: record.encodedCount, appending: true) {
                record.encode(into: $0)
            }
        }
        try pruneLog(newest: record.sequence, in: transaction)
        return record
    }

    /// How many records past ``PersistentDefaults/Options/logRetention`` the log may hold
    /// before a commit prunes it: 1/16 of the retention, between 1 and 64.
    static func pruneSlack(retention: Int) -> UInt64 { UInt64(min(max(retention / 16, 1), 64)) }

    /// Prunes the oldest records in batches, never the newest (`newest`).
    ///
    /// By count: a commit whose sequence is a multiple of the slack (`pruneSlack`) deletes every
    /// record more than `logRetention` behind it, so the log holds between `logRetention` and
    /// `logRetention + slack - 1` records, and the other commits open no cursor. The schedule
    /// depends only on the sequence, so it holds whichever process makes the commit.
    ///
    /// By bytes: when the log's pages take more than `logRetentionBytes` plus 1/16 of it, the
    /// oldest records are deleted until they take at most `logRetentionBytes`.
    ///
    /// The log's size is what its B-tree and overflow pages take in data.mdb, from `mdb_stat`,
    /// which copies the counters LMDB keeps in the transaction's database record (mdb.c,
    /// mdb_stat0): O(1), no scan, exact also after other processes' commits, and nothing new in
    /// the file format. Deleting a record frees its overflow pages at once, so the counters drop
    /// as the loop deletes; small records free a leaf page every few dozen deletions.
    private func pruneLog(newest: UInt64, in transaction: Transaction) throws {
        let retention = UInt64(max(options.logRetention, 1))
        let cutoff = newest > retention ? newest - retention : 0
        let countDue = cutoff > 0 && newest % Self.pruneSlack(retention: options.logRetention) == 0
        let byteBound = max(options.logRetentionBytes, 0)
        let bytes = try logBytes(in: transaction)
        let bytesDue = bytes - byteBound > byteBound / 16
        guard countDue || bytesDue else { return }
        var overBytes = bytes > byteBound
        try transaction.deleteLeading(databases.log) { key in
            let sequence = try logSequence(fromKey: key)
            guard sequence < newest else { return false }
            if countDue, sequence <= cutoff { return true }
            // Measured before each deletion past the count bound: the previous one may have
            // brought the log under the byte bound.
            if overBytes { overBytes = try logBytes(in: transaction) > byteBound }
            return overBytes
        }
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
                // Bytes this process last stored or read are not decoded again (see `lastKnown`).
                if let known = key.knownValue(of: bytes) { return known }
                let value = try key.decode(bytes)
                key.remember(bytes, encoding: value)
                return value
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

/// Facts that a logged commit of this process leaves for the next write transaction, so that
/// it need not read them again: the newest log sequence (an `MDB_LAST` cursor otherwise) and the
/// mirror owners in `meta` (a cursor over `meta` otherwise).
///
/// They are true exactly in the write transaction whose ID is one more than `transactionID`:
/// LMDB gives each write transaction the last committed one's ID plus one (mdb.c,
/// `mdb_txn_renew0`: `txn->mt_txnid = meta->mm_txnid; txn->mt_txnid++`), so any commit in
/// between — by another process, another handle of this process, or a write that did not go
/// through here — leaves a larger ID and the facts are read again. Recorded only after the
/// commit succeeded, and only for a commit that logged a record (an empty commit writes no meta
/// page and does not advance the ID).
struct CommitCache: Sendable {
    var transactionID: Int
    var lastSequence: UInt64
    /// Nil when unknown: not read, or `meta` written in that transaction.
    var mirrorOwners: [(localPrefix: [UInt8], record: [UInt8])]?

    /// Whether the facts hold in the write transaction with ID `id`.
    func isValid(inTransaction id: Int) -> Bool { transactionID &+ 1 == id }
}

extension StoreCore {
    /// Encodes `value` for `key`, as an error that names the key.
    func encode<Value>(_ value: Value, for key: PersistentDefaults.Key<Value>) throws(PersistentDefaultsError)
        -> [UInt8]
    {
        do {
            return try key.codec.encode(value)
        } catch {
            throw Self.encodingFailed(error, for: key)
        }
    }

    /// `encode`, appending to `buffer` through the codec's `encodeAppending` (which the caller
    /// checked is there).
    func encode<Value>(_ value: Value, for key: PersistentDefaults.Key<Value>, appendingTo buffer: inout ByteBuffer)
        throws(PersistentDefaultsError)
    {
        do {
            try key.codec.encodeAppending?(value, &buffer)
        } catch {
            throw Self.encodingFailed(error, for: key)
        }
    }

    /// The error of a value that `key`'s codec could not encode: it names the key and type.
    private static func encodingFailed<Value>(_ error: StoredValueError, for key: PersistentDefaults.Key<Value>)
        -> PersistentDefaultsError
    {
        .encodingFailed(key: key.name, type: "\(Value.self)", reason: error.description)
    }

    /// Throws ``PersistentDefaultsError/valueTooLarge(key:size:limit:)`` when `encoded` is larger
    /// than ``PersistentDefaults/Options/maxValueSize``.
    @inline(__always)
    func checkSize(_ encoded: [UInt8], of name: String) throws(PersistentDefaultsError) {
        try checkSize(encoded.count, of: name)
    }

    /// `checkSize` of a value `count` bytes long.
    @inline(__always)
    func checkSize(_ count: Int, of name: String) throws(PersistentDefaultsError) {
        if count > maxValueSize { throw .valueTooLarge(key: name, size: count, limit: maxValueSize) }
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

extension StoreCore {
    /// LMDB's page accounting: after every commit, each page up to the last one in use is one of
    /// the two meta pages, a page of a database (the free-page list's own, the main database's
    /// and the named ones') or listed free in the free-page database (mdb.c: `mdb_page_alloc`
    /// takes pages from that list or past the last one; `mdb_freelist_save` lists what a commit
    /// freed). A different sum means the free list names pages in use or lost some. Returns the
    /// problem, or nil; also nil when another client keeps databases of its own in the file, or
    /// writers committed during every one of three tries (the snapshot must be the newest, whose
    /// last page `mdb_env_info` reports).
    func pageAccountingProblem() throws -> String? {
        guard let accounting = try pageAccounting() else { return nil }
        if accounting.malformedFreeRecords > 0 {
            return "\(accounting.malformedFreeRecords) records of LMDB's free-page list are malformed (their length"
                + " does not match their size): the next write may overwrite data"
        }
        guard accounting.counted != accounting.expected else { return nil }
        return "LMDB's pages do not add up: \(accounting.expected) pages in use, but the databases, the free-page"
            + " list and the meta pages account for \(accounting.counted) (a damaged free-page list; the next"
            + " write may overwrite data)"
    }

    /// The pages the newest snapshot accounts for and the pages in use (`mdb_env_info`'s last
    /// page + 1); see ``pageAccountingProblem()`` for when it is nil.
    func pageAccounting() throws -> (counted: Int, expected: Int, malformedFreeRecords: Int)? {
        for _ in 0..<3 {
            let before = environment.info()
            let counted = try environment.withRead { transaction -> (id: Int, pages: Int, malformed: Int)? in
                let main = try transaction.statistics(Self.mainDatabase)
                guard main.entries == 3 else { return nil }  // Only the values, log and meta databases.
                var pages = 2  // The meta pages.
                for database in [Self.freeDatabase, Self.mainDatabase, databases.values, databases.log, databases.meta]
                {
                    let statistics = try transaction.statistics(database)
                    pages += statistics.branchPages + statistics.leafPages + statistics.overflowPages
                }
                // Each record of the free-page database is a list of page numbers (`pgno_t`, a
                // `size_t`) led by its length; a damaged one can claim any length.
                var malformed = 0
                try transaction.forEach(Self.freeDatabase) { _, value in
                    let width = MemoryLayout<Int>.size
                    let length = value.count >= width ? value.loadUnaligned(as: Int.self) : -1
                    guard length >= 0, length < value.count / width else {
                        malformed += 1
                        return true
                    }
                    pages += length
                    return true
                }
                return (transaction.id, pages, malformed)
            }
            guard let counted else { return nil }
            let after = environment.info()
            guard before.lastTransactionID == after.lastTransactionID, counted.id == after.lastTransactionID else {
                continue
            }
            return (counted.pages, after.lastPage + 1, counted.malformed)
        }
        return nil
    }

    /// LMDB's free-page database (`FREE_DBI`), readable by read-only transactions.
    static let freeDatabase: DatabaseHandle = 0
    /// LMDB's main database (`MAIN_DBI`), which holds the named databases' records.
    static let mainDatabase: DatabaseHandle = 1
}
