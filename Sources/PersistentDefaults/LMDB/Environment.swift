import CLMDB
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An `MDB_env *`; owned by exactly one `Environment`, which closes it.
typealias EnvironmentHandle = OpaquePointer
/// An `MDB_txn *`; begun and ended inside one `Environment` scope.
typealias TransactionHandle = OpaquePointer
/// An LMDB database handle (`MDB_dbi`).
typealias DatabaseHandle = MDB_dbi

/// The one place where LMDB return codes become errors.
@inline(__always)
func check(_ code: Int32, _ operation: @autoclosure () -> String) throws(PersistentDefaultsError) {
    if code != MDB_SUCCESS {
        throw PersistentDefaultsError.lmdb(code: LMDBResultCode(rawValue: code), operation: operation())
    }
}

/// Signals that the gate's exclusive side must be taken before a transaction is tried again.
private enum RetrySignal: Error {
    case mapResized
    /// `bytes`: what the failed transaction had put, read while it still held the writer lock.
    case mapFull(bytes: Int)
    /// The map may not hold `bytes` more: grow it before the transaction begins.
    case growFirst(bytes: Int)
}

/// How to open an environment.
struct EnvironmentConfiguration: Sendable, Equatable {
    var path: String
    var readOnly: Bool
    var noSync: Bool
    var mapSize: Int
    var maxReaders: Int
    /// How long a read waits for a free reader slot (``PersistentDefaults/Options/readerSlotWait``).
    var readerSlotWait: Duration = .seconds(3)
}

/// Facts about the environment (`MDB_envinfo`).
struct EnvironmentInfo: Sendable, Equatable {
    var mapSize: Int
    var lastPage: Int
    var lastTransactionID: Int
    var maxReaders: Int
    var readers: Int
}

/// One open LMDB environment: the only owner of its `MDB_env *`.
///
/// `@unchecked Sendable`: LMDB environments are thread-safe; every use of the handle happens
/// under `gate` (shared for transactions, exclusive for map changes, close and replacing the
/// handle after a failed map change), the kept read transactions are per thread
/// (``ReaderSlots``), the `write…`
/// fields are touched only by the thread that holds LMDB's process-shared writer mutex, and
/// `wakeChannel` is set once before the environment is shared.
final class Environment: @unchecked Sendable {
    /// Replaced only under the exclusive gate, when a failed map change forces a reopen.
    /// Unchecked exclusivity (also for `isClosed`): both change only under the exclusive gate,
    /// while no read runs, so the dynamic check on every read would guard nothing.
    @exclusivity(unchecked) fileprivate private(set) var handle: EnvironmentHandle
    let gate: TransactionGate
    let configuration: EnvironmentConfiguration
    /// Whether the environment was opened without LMDB's lock file (read-only directories).
    let isLockless: Bool
    /// For a lockless environment: tells whether another process has the store open.
    private let lockProbe: LockFileProbe?
    /// LMDB's page size in bytes.
    let pageSize: Int
    /// Reset read transactions kept per thread for reuse (`mdb_txn_reset` / `mdb_txn_renew`).
    let readerSlots: ReaderSlots
    @exclusivity(unchecked) private var isClosed = false
    /// Why the environment became unusable (a failed map change that could not be undone), if so.
    private var brokenReason: String?
    /// The named databases opened in this environment, in the order LMDB numbered them, to open
    /// them again after a reopen.
    private let openedDatabases = Locked<[(name: String, handle: DatabaseHandle)]>([])
    private var writeSawMapFull = false
    /// Bytes put in the current write transaction, to size the map when it is full.
    private var writeBytes = 0
    /// Whether the current write transaction put or deleted anything.
    private var writeTouched = false
    /// The databases the current write transaction put into or deleted from, one bit per
    /// database handle (handles are small: at most `mdb_env_set_maxdbs` + 2).
    private var writeDatabases: UInt64 = 0
    /// Whether the current write transaction appended a commit-log record.
    private var writeLogged = false
    /// The wake-up mask of the current write transaction's changed keys (see `WakeChannel`).
    private var writeMask: UInt64 = 0
    /// The sequence of the record the current write transaction appended, when `writeLogged`.
    private var writeSequence: UInt64 = 0
    /// This process's recent commits that changed pages, by transaction ID, and whether each
    /// appended a log record (store creation and migrations do not): see ``LocalCommits``.
    let localCommitIDs = LocalCommits()
    /// Every commit of this process that changed pages, logged or not, counted after the
    /// commit: the flusher syncs when it moved, and a `.bounded` open that created the store
    /// syncs when it is not zero. (The watcher tells this process's commits by ID:
    /// `localCommitIDs`.)
    let localCommits = Atomic<Int>(0)
    /// The store's wake-up channel (the `notify` file), advanced after every commit that
    /// changed pages; nil when the file cannot be opened for writing (read-only directory or
    /// file, another layout, a platform without futexes), and until ``attachWakeChannel()``.
    /// Set once, by the opening thread before the environment is shared (the store registry's
    /// lock then orders it before every other thread's read), so it needs no lock; so is
    /// `attachedWakeChannel`.
    @exclusivity(unchecked) private(set) var wakeChannel: WakeChannel?
    @exclusivity(unchecked) private var attachedWakeChannel = false
    /// The identity of the open `data.mdb`, which this environment holds open (so no other file
    /// can take its inode number meanwhile): how the store registry tells one store from another.
    let dataFile: FileIdentity

    init(_ configuration: EnvironmentConfiguration) throws(PersistentDefaultsError) {
        self.configuration = configuration
        do {
            try StoreFiles.allocateLockFile(in: configuration.path, maxReaders: configuration.maxReaders)
            handle = try Self.open(configuration, lockless: false)
            isLockless = false
            lockProbe = nil
        } catch .lmdb(let code, _)
            where configuration.readOnly && (code.rawValue == EACCES || code.rawValue == EROFS)
        {
            // The lock file cannot be created or opened for writing: a read-only directory.
            // Without MDB_NOLOCK LMDB refuses. Without the lock file this process has no reader
            // slot, so a writer in another process would reuse the pages it reads: that is safe
            // only while no other process has the environment open, which the probe checks now
            // and around every read transaction.
            let probe = try LockFileProbe(directory: configuration.path)
            try probe.checkNoOtherProcess()
            handle = try Self.open(configuration, lockless: true)
            isLockless = true
            lockProbe = probe
        }
        var stat = MDB_stat()
        _ = mdb_env_stat(handle, &stat)  // Cannot fail on an open environment.
        pageSize = Int(stat.ms_psize)
        var descriptor: mdb_filehandle_t = -1
        _ = mdb_env_get_fd(handle, &descriptor)  // Cannot fail on an open environment.
        guard let identity = FileIdentity(descriptor: descriptor) else {
            let failure = errno
            // The environment is not handed out: it is closed here (`deinit` does not run).
            mdb_env_close(handle)
            throw .fileSystem(path: configuration.path + "/" + StoreFiles.dataFile, errno: failure, operation: "fstat")
        }
        dataFile = identity
        // The reader table has the size of the lock file, which the process that created it chose:
        // mdb.c, mdb_env_setup_locks, for a lock file another process has open, `rsize = size; …
        // env->me_maxreaders = size/sizeof(MDB_reader) + 1;`. Kept transactions are bounded by
        // that size, not by `configuration.maxReaders`, or they could take every slot of a smaller
        // table and leave none to other processes.
        var readers: UInt32 = 0
        _ = mdb_env_get_maxreaders(handle, &readers)  // Cannot fail on an open environment.
        readerSlots = ReaderSlots(maxReaders: Int(readers))
        do {
            gate = try TransactionGate(slots: readerSlots)
        } catch {
            // The environment is not handed out: it is closed here (`deinit` does not run).
            mdb_env_close(handle)
            throw error
        }
        try clearStaleReadersAtOpen()
    }

    /// Opens the wake-up channel, creating the `notify` file when this open may write; later calls
    /// do nothing. Called by the opening thread before the environment is shared, once the
    /// directory is known to hold a store (an open refused for what the directory holds, such as
    /// another LMDB environment or a newer format, adds no file to it), and by a creating open
    /// before its creation commits (so no process can open the new store before the file exists:
    /// it would run without the channel). A read-only open uses an existing file (to wait on it)
    /// but never creates one.
    func attachWakeChannel() {
        guard !attachedWakeChannel else { return }
        attachedWakeChannel = true
        wakeChannel =
            isLockless ? nil : WakeChannel.attach(directory: configuration.path, create: !configuration.readOnly)
    }

    /// Clears reader slots of crashed processes, unless lockless.
    private func clearStaleReadersAtOpen() throws(PersistentDefaultsError) {
        if !isLockless {
            var dead: Int32 = 0
            // Crashed readers leave stale slots; lmdb.h: "Check for stale entries in the reader lock table."
            try check(mdb_reader_check(handle, &dead), "mdb_reader_check")
        }
    }

    private static func open(_ configuration: EnvironmentConfiguration, lockless: Bool, mapSize: Int? = nil)
        throws(PersistentDefaultsError) -> EnvironmentHandle
    {
        var created: EnvironmentHandle?
        try check(mdb_env_create(&created), "mdb_env_create")
        guard let env = created else {
            throw .lmdb(code: .invalid, operation: "mdb_env_create")
        }
        do {
            try installAssertionGuard(env)
            try check(mdb_env_set_maxdbs(env, 8), "mdb_env_set_maxdbs")
            try check(mdb_env_set_mapsize(env, mapSize ?? configuration.mapSize), "mdb_env_set_mapsize")
            try check(
                mdb_env_set_maxreaders(env, UInt32(clamping: max(configuration.maxReaders, 1))),
                "mdb_env_set_maxreaders")
            var flags = MDB_NOTLS | MDB_NORDAHEAD
            if configuration.readOnly { flags |= MDB_RDONLY }
            if configuration.noSync { flags |= MDB_NOSYNC }
            if lockless { flags |= MDB_NOLOCK }
            try check(
                mdb_env_open(env, configuration.path, UInt32(bitPattern: flags), 0o600),
                "mdb_env_open")
        } catch {
            // lmdb.h: "If this function fails, mdb_env_close() must be called to discard the MDB_env handle."
            mdb_env_close(env)
            throw error
        }
        return env
    }

    deinit { close() }

    /// Ends pooled transactions and closes the environment; later calls do nothing.
    func close() {
        gate.withExclusive {
            guard !isClosed else { return }
            isClosed = true
            // lmdb.h on mdb_env_close: "All transactions, databases, and cursors must already be
            // closed before calling this function."
            readerSlots.emptyAll(closing: true)
            mdb_env_close(handle)
        }
    }

    // MARK: Transactions

    /// Runs `body` in a read transaction (a consistent snapshot), ended on every path.
    ///
    /// With `runsUserCode` false (the default) the read goes through the calling thread's
    /// ``ReaderSlot``, whose busy state is the gate's shared side (no shared lock), which is only
    /// right when `body` cannot start another transaction on this thread: library reads and
    /// value decoding. Scopes that run the caller's closure pass true and take the gate's rwlock.
    ///
    /// Inside such a scope on this thread, after another process grew the map, a new read cannot
    /// begin (`MDB_MAP_RESIZED`) and the larger map cannot be adopted until the scope ends (that
    /// needs every read of this process to end, the scope's own included): the read is then
    /// answered from the scope's snapshot, and its transaction says so
    /// (``Transaction/isEnclosingSnapshot``).
    func withRead<R>(runsUserCode: Bool = false, _ body: (Transaction) throws -> R) throws -> R {
        while true {
            do {
                if runsUserCode {
                    return try gate.withShared {
                        try readOnce { transaction in
                            try gate.withEnclosingRead(transaction.handle) { try body(transaction) }
                        }
                    }
                }
                return try readThroughSlot(body)
            } catch RetrySignal.mapResized {
                if gate.isHeldByCurrentThread, let enclosing = gate.enclosingRead {
                    return try body(Transaction(handle: enclosing, environment: self))
                }
                try adoptMapSize()
            }
        }
    }

    /// A read whose gate hold is the calling thread's busy slot; falls back to the rwlock for a
    /// thread without a slot or whose slot another thread is reclaiming.
    @inline(__always)
    private func readThroughSlot<R>(_ body: (Transaction) throws -> R) throws -> R {
        // Each use of the slot through `_withUnsafeGuaranteedRef` (see
        // `ReaderSlots.unretainedSlotOfCurrentThread()`): with a strong local across `body` the
        // compiler retained the slot twice per read (with an `unowned(unsafe)` one, more).
        if let slot = readerSlots.unretainedSlotOfCurrentThread() {
            switch slot._withUnsafeGuaranteedRef({ $0.enter(gate) }) {
            case .entered:
                let transaction: TransactionHandle
                do {
                    try checkOpen()
                    try lockProbe?.checkNoOtherProcess()
                    transaction = try slot._withUnsafeGuaranteedRef { try renew($0) }
                } catch {
                    slot._withUnsafeGuaranteedRef { $0.release(keeping: $0.handle) }
                    throw error
                }
                defer { slot._withUnsafeGuaranteedRef { endRead(transaction, $0) } }
                let result = try body(Transaction(handle: transaction, environment: self))
                try lockProbe?.checkNoOtherProcess()
                return result
            case .nested:
                return try readOnce(body)
            case .unavailable:
                break
            }
        }
        return try gate.withSharedUnmarked { try readOnce(body) }
    }

    @inline(__always)
    private func readOnce<R>(_ body: (Transaction) throws -> R) throws -> R {
        try checkOpen()
        try lockProbe?.checkNoOtherProcess()
        let (transaction, slot) = try beginRead()
        defer { endRead(transaction, slot) }
        let result = try body(Transaction(handle: transaction, environment: self))
        // A writer that opened the store while this snapshot was read may have reused its pages:
        // what was read cannot be trusted then.
        try lockProbe?.checkNoOtherProcess()
        return result
    }

    /// Begins a read: renews the calling thread's kept transaction when it has one that is not
    /// in use, else begins one. Returns the slot to give the transaction back to, if kept.
    @inline(__always)
    private func beginRead() throws -> (TransactionHandle, ReaderSlot?) {
        guard let slot = readerSlots.slotOfCurrentThread(), slot.acquire() else {
            return (try beginReadTransaction(), nil)
        }
        return (try renew(slot), slot)
    }

    /// Renews the kept transaction of `slot`, which the caller made busy, or begins one. On an
    /// error the slot is given back empty, unless it still holds its old transaction.
    @inline(__always)
    private func renew(_ slot: ReaderSlot) throws -> TransactionHandle {
        if let kept = slot.handle {
            let code = renewShowingItsLabel(kept)
            if code == MDB_SUCCESS { return kept }
            mdb_txn_abort(kept)
            slot.release(keeping: nil)
            if code == MDB_MAP_RESIZED { throw RetrySignal.mapResized }
            try check(code, "mdb_txn_renew")
        }
        do {
            let begun = try beginReadTransaction()
            readerSlots.armReaper()  // The slot keeps this transaction after the read.
            return begun
        } catch {
            slot.release(keeping: nil)
            throw error
        }
    }

    /// `mdb_txn_begin` of a read transaction; when the reader table is full, the idle kept
    /// transactions of other threads are aborted and the begin is tried again, for up to
    /// `readerSlotWait` (other processes' idle slots are emptied within two reaper intervals).
    private func beginReadTransaction() throws -> TransactionHandle {
        var transaction: TransactionHandle?
        var code = mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &transaction)
        if code == MDB_READERS_FULL, readerSlots.reclaimIdle() > 0 {
            code = mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &transaction)
        }
        if code == MDB_READERS_FULL { code = waitForReaderSlot(&transaction) }
        if code == MDB_SUCCESS, let begun = transaction, snapshotMayShowALaterCommit(begun) {
            mdb_txn_reset(begun)
            code = renewShowingItsLabel(begun)
            if code != MDB_SUCCESS { mdb_txn_abort(begun) }
        }
        if code == MDB_MAP_RESIZED { throw RetrySignal.mapResized }
        try check(code, "mdb_txn_begin(read-only)")
        guard let transaction else {
            throw PersistentDefaultsError.lmdb(code: .badTransaction, operation: "mdb_txn_begin")
        }
        return transaction
    }

    /// Begins a read transaction again and again, 1 ms apart at first and at most 50 ms, while
    /// LMDB's reader table stays full and `readerSlotWait` has not passed. LMDB tells nobody when
    /// a slot frees: the slots are other processes' (the reaper of each empties its idle ones)
    /// or this process's (reclaimed here each time), so there is nothing to wait on but time.
    @inline(never)
    private func waitForReaderSlot(_ transaction: inout TransactionHandle?) -> Int32 {
        let clock = ContinuousClock()
        let deadline = clock.now + configuration.readerSlotWait
        var pause = Duration.milliseconds(1)
        var code = MDB_READERS_FULL
        while code == MDB_READERS_FULL, clock.now < deadline {
            let (seconds, attoseconds) = min(pause, deadline - clock.now).components
            usleep(UInt32(clamping: seconds * 1_000_000 + attoseconds / 1_000_000_000_000))
            pause = min(pause * 2, .milliseconds(50))
            readerSlots.reclaimIdle()
            code = mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &transaction)
        }
        return code
    }

    /// `mdb_txn_renew` of a reset read transaction, renewed again until its snapshot is the
    /// commit its ID names (see ``snapshotMayShowALaterCommit(_:)``).
    @inline(__always)
    private func renewShowingItsLabel(_ transaction: TransactionHandle) -> Int32 {
        var code = mdb_txn_renew(transaction)
        while code == MDB_SUCCESS, snapshotMayShowALaterCommit(transaction) {
            mdb_txn_reset(transaction)
            code = mdb_txn_renew(transaction)
        }
        return code
    }

    /// Whether a read transaction that just began may show a later commit than the one its ID
    /// names, so that it must be renewed.
    ///
    /// LMDB 0.9 (mdb.c, `mdb_txn_renew0`) takes the last published transaction ID N, then the
    /// meta page `me_metas[N & 1]`, and copies that page's database roots later without checking
    /// that it still holds N. A reader delayed between the two (preempted, with more threads
    /// than cores) while the writer commits twice more copies the roots of N+2 or later: the
    /// snapshot is labelled N and shows a later commit. The next read, begun while the writer
    /// has written its next meta page but not yet published its ID, shows an older value than
    /// this one (seen: "thread 3: 1340 after 1341"), and the watcher, which counts commits by
    /// snapshot IDs, miscounts. Measured: 82 of 39.8 million reads, 16 reader threads and one
    /// writer on 2 cores (`SnapshotLabelTests`); libmdbx re-checks the meta page after the copy
    /// for this race (its "Retry on a race, ITS#7970").
    ///
    /// Checked after the copy: when neither meta page holds an ID past N+1, page N & 1 still
    /// holds N, so the roots copied from it are N's. A false alarm (two commits since) only
    /// costs a renewal. A meta page being overwritten during the copy itself and not yet done
    /// when this check runs (the writer's ~150-byte `pwrite` interrupted there) is not caught.
    @inline(__always)
    private func snapshotMayShowALaterCommit(_ transaction: TransactionHandle) -> Bool {
        var info = MDB_envinfo()
        _ = mdb_env_info(handle, &info)  // Only reads the two meta pages' IDs; always returns 0.
        return info.me_last_txnid > mdb_txn_id(transaction) + 1
    }

    /// Ends a read: a kept transaction is reset (it holds no snapshot from here on) and given
    /// back to its slot; any other is aborted.
    @inline(__always)
    private func endRead(_ transaction: TransactionHandle, _ slot: ReaderSlot?) {
        guard let slot else {
            mdb_txn_abort(transaction)
            return
        }
        mdb_txn_reset(transaction)
        slot.release(keeping: transaction)
    }

    /// Runs `body` in a write transaction and commits it when `body` returns.
    ///
    /// When the map is full, the transaction is aborted, the map grown and `body` run again, so
    /// `body` must have no effects outside the transaction. `sizeHint` is the number of bytes the
    /// caller expects to write; the map is grown before the transaction when they would not fit.
    /// An error thrown by `body` aborts the transaction and is rethrown.
    func withWrite<R>(sizeHint: Int = 0, _ body: (Transaction) throws -> R) throws -> R {
        if configuration.readOnly { throw PersistentDefaultsError.readOnly(path: configuration.path) }
        if gate.isWritingOnCurrentThread { throw PersistentDefaultsError.nestedWrite }
        var needed = sizeHint
        // Growing takes the gate exclusively, which a thread already holding it cannot do.
        let canGrow = !gate.isHeldByCurrentThread
        while true {
            do {
                return try gate.withSharedWriting {
                    // Checked under the same hold as the write: one shared section per write.
                    try checkOpen()
                    if canGrow, needsGrowth(forWriting: needed) { throw RetrySignal.growFirst(bytes: needed) }
                    return try writeOnce(body)
                }
            } catch RetrySignal.mapResized {
                try adoptMapSize()
            } catch RetrySignal.growFirst(let bytes) {
                try grow(toFit: bytes)
            } catch RetrySignal.mapFull(let bytes) {
                guard !gate.isHeldByCurrentThread else {
                    throw PersistentDefaultsError.lmdb(
                        code: .mapFull, operation: "grow the map inside a read on this thread")
                }
                needed = max(needed * 2, bytes)
                try grow(toFit: needed)
            }
        }
    }

    /// Call holding the gate's shared side, with the environment checked open.
    private func writeOnce<R>(_ body: (Transaction) throws -> R) throws -> R {
        var begun: TransactionHandle?
        let code = mdb_txn_begin(handle, nil, 0, &begun)
        if code == MDB_MAP_RESIZED { throw RetrySignal.mapResized }
        try check(code, "mdb_txn_begin")
        guard let transaction = begun else {
            throw PersistentDefaultsError.lmdb(code: .badTransaction, operation: "mdb_txn_begin")
        }
        writeSawMapFull = false
        writeBytes = 0
        writeTouched = false
        writeDatabases = 0
        writeLogged = false
        writeMask = 0
        let result: R
        do {
            result = try body(Transaction(handle: transaction, environment: self))
        } catch {
            // Read before the abort releases LMDB's writer mutex to the next writer.
            let (mapFull, bytes) = (writeSawMapFull, writeBytes)
            mdb_txn_abort(transaction)
            if mapFull { throw RetrySignal.mapFull(bytes: bytes) }
            throw error
        }
        if writeSawMapFull {
            let bytes = writeBytes
            mdb_txn_abort(transaction)
            throw RetrySignal.mapFull(bytes: bytes)
        }
        // Read before the commit: it releases LMDB's writer mutex, and the next writer resets it.
        let touched = writeTouched
        let unlogged = touched && !writeLogged
        // A commit that logged no record changed keys that nobody can name: it wakes everybody.
        let mask = unlogged ? WakeChannel.everything : writeMask | WakeChannel.everyCommit
        let loggedSequence = writeLogged ? writeSequence : nil
        let bytes = writeBytes
        let id = mdb_txn_id(transaction)
        // lmdb.h: the transaction handle is freed by mdb_txn_commit whether it succeeds or not.
        let commitCode = mdb_txn_commit(transaction)
        if commitCode == MDB_MAP_FULL { throw RetrySignal.mapFull(bytes: bytes) }
        if commitCode == EIO, let explained = diagnoseShortWrite(transactionBytes: bytes) { throw explained }
        try check(commitCode, "mdb_txn_commit")
        // Sequentially consistent: pairs with the flusher's arming (see `Flusher.markDirty`).
        if touched {
            localCommits.add(1, ordering: .sequentiallyConsistent)
            localCommitIDs.record(transactionID: id, logged: !unlogged)
        }
        // The commit is visible to new readers now: confirm its announcement and wake the other
        // processes that observe its keys (this process's observers get it from the committing
        // thread). Never fails a commit.
        if let loggedSequence { wakeChannel?.confirm(sequence: loggedSequence) }
        if touched { wakeChannel?.signal(mask) }
        return result
    }

    /// Records that the current write transaction appended the commit-log record `sequence`
    /// whose changed keys have the wake-up bits `mask`, and announces it on the wake-up channel
    /// (before the commit, under LMDB's writer lock; see ``WakeChannel/announce(sequence:mask:)``).
    func noteLogged(sequence: UInt64, mask: UInt64) {
        writeLogged = true
        writeSequence = sequence
        writeMask = mask
        wakeChannel?.announce(sequence: sequence, mask: mask | WakeChannel.everyCommit)
    }

    /// Records the size of a put in the current write transaction, the database it changed, and
    /// whether it hit `MDB_MAP_FULL`.
    func notePut(bytes: Int, code: Int32, database: DatabaseHandle) {
        writeBytes += bytes
        writeTouched = true
        writeDatabases |= Self.bit(of: database)
        if code == MDB_MAP_FULL { writeSawMapFull = true }
    }

    /// Whether the current write transaction put into or deleted from `database`.
    func wrote(_ database: DatabaseHandle) -> Bool { writeDatabases & Self.bit(of: database) != 0 }

    /// The bit of `database` in `writeDatabases`; handles past 63 share the last bit.
    private static func bit(of database: DatabaseHandle) -> UInt64 { 1 << UInt64(min(database, 63)) }

    // MARK: Map size

    /// Call holding the gate.
    private func needsGrowth(forWriting bytes: Int) -> Bool {
        let facts = rawInfo()
        let used = (facts.lastPage + 1) * pageSize
        // Copy-on-write touches a branch path per change; twice the payload plus slack is a safe bound.
        return used + 2 * bytes + 64 * pageSize > facts.mapSize
    }

    /// Grows the map so that `bytes` more fit, doubling up to 1 GiB and then adding 1 GiB steps.
    private func grow(toFit bytes: Int) throws {
        try gate.withExclusive {
            try checkOpen()
            let facts = rawInfo()
            let used = (facts.lastPage + 1) * pageSize
            let gib = 1 << 30
            var size = facts.mapSize
            while size < used + 2 * bytes + (1 << 20) || size == facts.mapSize {
                size = size < gib ? size * 2 : size + gib
            }
            try setMapSize(size, previous: facts.mapSize)
        }
    }

    /// `mdb_env_set_mapsize` with the gate held exclusively; on failure the environment is
    /// reopened with the `previous` size, so that the error leaves it usable.
    ///
    /// mdb.c (0.9.24), `mdb_env_set_mapsize` on an open environment: `munmap(env->me_map,
    /// env->me_mapsize); env->me_mapsize = size; … rc = mdb_env_map(env, old); if (rc) return rc;`
    /// and `mdb_env_map` on a failed mmap: `env->me_map = NULL; return ErrCode();`. The old map
    /// is gone, `me_metas` still point into it, and `me_maxpg` still describes it: the next
    /// `mdb_txn_begin` reads the unmapped meta pages and crashes. Calling `mdb_env_set_mapsize`
    /// again cannot repair it: with `me_map` NULL it only records the size (its `if
    /// (env->me_map)` branch is skipped) and maps nothing. The only way back is to close the
    /// `MDB_env` (`mdb_env_close0` unmaps only `if (env->me_map)`) and open a new one.
    private func setMapSize(_ size: Int, previous: Int) throws {
        let code = mdb_env_set_mapsize(handle, size)
        guard code != MDB_SUCCESS else { return }
        // EINVAL: a transaction of this environment is active; LMDB returned before unmapping.
        if code == EINVAL { try check(code, "mdb_env_set_mapsize(\(size))") }
        let failure = PersistentDefaultsError.lmdb(
            code: LMDBResultCode(rawValue: code),
            operation: "mdb_env_set_mapsize(\(size)) ("
                + (size == 0 ? "mapping the store at the size another process set" : "growing the map")
                + "; the environment was reopened at its previous map size \(previous))")
        try reopen(mapSize: previous, after: failure)
        throw failure
    }

    /// Replaces the `MDB_env` whose map a failed `mdb_env_set_mapsize` left unmapped: closes it
    /// and opens the environment again at `mapSize` (LMDB rounds it up to the used pages), with
    /// the same named databases under the same numbers. Call with the gate held exclusively, so
    /// that no transaction of this process is active. If that fails too, the environment is
    /// marked broken: every later call throws instead of touching LMDB.
    private func reopen(mapSize: Int, after failure: PersistentDefaultsError) throws {
        readerSlots.emptyAll(closing: false)
        // lmdb.h: "Only a single thread may call this function. All transactions, databases,
        // and cursors must already be closed before calling this function."
        mdb_env_close(handle)
        do {
            let replacement = try Self.open(configuration, lockless: isLockless, mapSize: mapSize)
            do {
                try reopenDatabases(in: replacement)
            } catch {
                mdb_env_close(replacement)
                throw error
            }
            handle = replacement
        } catch {
            isClosed = true
            readerSlots.emptyAll(closing: true)
            brokenReason = "\(failure); reopening the environment failed too: \(error)"
            throw PersistentDefaultsError.lmdb(
                code: failure.code ?? .invalid, operation: brokenReason ?? "\(failure)")
        }
        // Best effort, as at open: a failure here leaves stale slots, which the next open clears.
        try? clearStaleReadersAtOpen()
    }

    /// Opens the named databases again, in the order that gives them their old numbers (LMDB
    /// numbers a newly opened database with the first free slot, mdb.c `mdb_dbi_open`), and
    /// checks that it did.
    private func reopenDatabases(in environment: EnvironmentHandle) throws {
        let databases = openedDatabases.withLock { $0 }.sorted { $0.handle < $1.handle }
        var begun: TransactionHandle?
        try check(mdb_txn_begin(environment, nil, UInt32(MDB_RDONLY), &begun), "mdb_txn_begin(read-only)")
        guard let transaction = begun else {
            throw PersistentDefaultsError.lmdb(code: .badTransaction, operation: "mdb_txn_begin")
        }
        for database in databases {
            var number: MDB_dbi = 0
            let code = mdb_dbi_open(transaction, database.name, 0, &number)
            guard code == MDB_SUCCESS, number == database.handle else {
                mdb_txn_abort(transaction)
                try check(code, "mdb_dbi_open(\(database.name))")
                throw PersistentDefaultsError.lmdb(
                    code: .badDatabaseHandle, operation: "reopen database \(database.name) as \(database.handle)")
            }
        }
        // lmdb.h: "After a successful commit the handle will reside in the shared environment".
        try check(mdb_txn_commit(transaction), "mdb_txn_commit(read-only)")
    }

    /// Records a named database opened in this environment (see `reopenDatabases`).
    func noteOpened(_ name: String, as database: DatabaseHandle) {
        openedDatabases.withLock { opened in
            if !opened.contains(where: { $0.handle == database }) { opened.append((name, database)) }
        }
    }

    /// Adopts the map size another process set (lmdb.h: "call mdb_env_set_mapsize with a size of zero").
    private func adoptMapSize() throws {
        guard !gate.isHeldByCurrentThread else {
            throw PersistentDefaultsError.lmdb(
                code: .mapResized, operation: "adopt the map size inside a read on this thread")
        }
        try gate.withExclusive {
            try checkOpen()
            readerSlots.emptyAll(closing: false)
            try setMapSize(0, previous: rawInfo().mapSize)
        }
    }

    // MARK: Maintenance

    /// Flushes written pages to disk (`mdb_env_sync` with force); does nothing once closed, or
    /// for a read-only environment, which has no commits of this process and which LMDB refuses
    /// to sync (`mdb_env_sync` returns EACCES for `MDB_RDONLY`).
    func sync() throws {
        guard !configuration.readOnly else { return }
        try gate.withShared {
            guard !isClosed else { return }
            try check(mdb_env_sync(handle, 1), "mdb_env_sync")
        }
    }

    /// `sync()` for the exit-time flush: gives up (returns false) when the gate cannot be taken
    /// within `timeout` seconds, because another thread holds it exclusively (growing the map or
    /// closing) while the process exits, instead of blocking the exit.
    func syncAtExit(timeout: Double) throws -> Bool {
        let synced: Bool? = try gate.withShared(timeout: timeout) {
            guard !isClosed else { return true }
            // mdb.c, mdb_env_sync: with force it fdatasyncs the data file (MDB_NOSYNC or not);
            // it takes no LMDB lock, so a commit in progress on another thread cannot block it.
            try check(mdb_env_sync(handle, 1), "mdb_env_sync")
            return true
        }
        return synced ?? false
    }

    /// Throws once the environment is closed; call with the gate held.
    @inline(__always)
    private func checkOpen() throws {
        // A broken environment is also closed: one load on the read path.
        guard isClosed else { return }
        throw PersistentDefaultsError.storeClosed(path: configuration.path, reason: brokenReason)
    }

    /// Environment facts (`mdb_env_info`); zeros once the environment is closed.
    func info() -> EnvironmentInfo {
        gate.withShared {
            isClosed
                ? EnvironmentInfo(mapSize: 0, lastPage: 0, lastTransactionID: 0, maxReaders: 0, readers: 0) : rawInfo()
        }
    }

    /// `info()` inside a read of `transaction`, which holds the gate already. Taking its shared
    /// side again is wrong there: a read through the thread's slot holds no rwlock and is not
    /// marked, so it would wait at the turnstile for an exclusive section (growing or adopting
    /// the map) that waits for this very read's slot — a deadlock.
    func info(during transaction: Transaction) -> EnvironmentInfo { rawInfo() }

    /// `info()` for callers that hold the gate exclusively.
    private func rawInfo() -> EnvironmentInfo {
        var info = MDB_envinfo()
        _ = mdb_env_info(handle, &info)  // Only reads the meta page; always returns 0.
        return EnvironmentInfo(
            mapSize: info.me_mapsize, lastPage: info.me_last_pgno, lastTransactionID: info.me_last_txnid,
            maxReaders: Int(info.me_maxreaders), readers: Int(info.me_numreaders))
    }

    /// Statistics of the environment's main database (`mdb_env_stat`).
    func statistics() -> DatabaseStatistics {
        gate.withShared {
            var stat = MDB_stat()
            if !isClosed { _ = mdb_env_stat(handle, &stat) }  // Cannot fail on an open environment.
            return DatabaseStatistics(stat)
        }
    }

    /// Removes reader slots of dead processes; returns how many were cleared.
    func clearStaleReaders() throws -> Int {
        guard !isLockless else { return 0 }
        return try gate.withShared {
            try checkOpen()
            var dead: Int32 = 0
            try check(mdb_reader_check(handle, &dead), "mdb_reader_check")
            return Int(dead)
        }
    }

    /// The reader table as `mdb_reader_list` prints it.
    func readerTable() -> String {
        final class Lines { var text = "" }
        let lines = Lines()
        let context = Unmanaged.passUnretained(lines).toOpaque()
        gate.withShared {
            guard !isClosed else { return }
            _ = mdb_reader_list(
                handle,
                { message, context in
                    guard let message, let context else { return -1 }
                    Unmanaged<Lines>.fromOpaque(context).takeUnretainedValue().text += String(cString: message)
                    return 0
                }, context)
        }
        return lines.text
    }

    /// Writes a copy of the environment to the directory `path`, compacted when asked, into a
    /// new `data.mdb` of mode 0600.
    ///
    /// The copy reads in a read transaction of its own (mdb.c, `mdb_env_copyfd0/1`:
    /// `mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)`), which meets `MDB_MAP_RESIZED` when another
    /// process grew the map: the size is adopted and the copy made again, as a read would.
    func copy(to path: String, compact: Bool) throws {
        while true {
            do {
                return try gate.withShared {
                    try checkOpen()
                    // mdb_env_copyfd2 into a file made here instead of mdb_env_copy2, which creates
                    // it with mode 0666 less the umask: settings may be private from the first byte.
                    let file = path + "/" + StoreFiles.dataFile
                    try StoreFiles.writeNewPrivateFile(file) { descriptor in
                        let code = mdb_env_copyfd2(handle, descriptor, compact ? UInt32(MDB_CP_COMPACT) : 0)
                        // The file is removed again before the copy is retried.
                        if code == MDB_MAP_RESIZED { throw RetrySignal.mapResized }
                        try check(code, "mdb_env_copyfd2(\(file))")
                    }
                }
            } catch RetrySignal.mapResized {
                try adoptMapSize()
            }
        }
    }
}

extension Environment {
    /// Runs `body` in a transaction that is committed, so that database handles it opens stay
    /// valid (lmdb.h: "After a successful commit the handle will reside in the shared environment").
    func withSetup<R>(write: Bool, _ body: (Transaction) throws -> R) throws -> R {
        if write { return try withWrite(body) }
        while true {
            do {
                return try setupRead(body)
            } catch RetrySignal.mapResized {
                // Another process grew the map after `mdb_env_open` mapped it: adopted as by reads.
                try adoptMapSize()
            }
        }
    }

    private func setupRead<R>(_ body: (Transaction) throws -> R) throws -> R {
        try gate.withShared {
            var begun: TransactionHandle?
            let code = mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &begun)
            if code == MDB_MAP_RESIZED { throw RetrySignal.mapResized }
            try check(code, "mdb_txn_begin(read-only)")
            guard let transaction = begun else {
                throw PersistentDefaultsError.lmdb(code: .badTransaction, operation: "mdb_txn_begin")
            }
            let result: R
            do {
                result = try body(Transaction(handle: transaction, environment: self))
                try lockProbe?.checkNoOtherProcess()
            } catch {
                mdb_txn_abort(transaction)
                throw error
            }
            try check(mdb_txn_commit(transaction), "mdb_txn_commit(read-only)")
            return result
        }
    }
}
