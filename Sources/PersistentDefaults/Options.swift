import Foundation

extension PersistentDefaults {
    /// How a store is opened.
    ///
    /// ```swift
    /// var options = PersistentDefaults.Options()
    /// options.durability = .bounded(interval: .milliseconds(200))
    /// options.logRetention = 1_000
    /// options.logRetentionBytes = 1 << 20
    /// options.maxValueSize = 1 << 20
    /// let store = try PersistentDefaults(path: dir, options: options)
    /// ```
    public struct Options: Sendable {
        /// When a commit reaches the disk. Default ``Durability/sync``.
        public var durability: Durability = .sync
        /// Open without writing: writes throw ``PersistentDefaultsError/readOnly(path:)``, and a
        /// missing store is an error instead of being created (whatever ``createIfMissing`` says).
        public var readOnly = false
        /// Whether opening a path where no store exists creates one. Default `true`. With
        /// `false`, such an open throws ``PersistentDefaultsError/notAStore(path:reason:)`` and
        /// creates nothing (no directory, no store) — also for a writable open, so that a tool
        /// that must only change existing stores needs no check before it opens (which would race
        /// with another process removing or creating the store):
        ///
        /// ```swift
        /// var options = PersistentDefaults.Options()
        /// options.createIfMissing = false
        /// let store = try PersistentDefaults(path: path, options: options)  // throws when absent
        /// ```
        public var createIfMissing = true
        /// The first size of the memory map in bytes; the map grows by itself. Default 1 MiB.
        public var initialMapSize = 1 << 20
        /// How many commit-log records to keep at least; older ones are pruned. At least 1.
        /// Default 10,000.
        ///
        /// The log is pruned in batches, not on every commit: it may hold up to one record less
        /// than a slack of 1/16 of the retention (at most 64) more than this (10,063 by default). Each
        /// commit whose sequence number is a multiple of the slack prunes back to exactly
        /// `logRetention`; the commits in between delete nothing. A retention below 32 has a
        /// slack of 1 and is kept exactly.
        public var logRetention = 10_000
        /// How many bytes of `data.mdb` the commit log may take (its pages, as `mdb_stat` counts
        /// them), with a slack of 1/16: once the log's pages exceed this plus 1/16 of it, the
        /// committing transaction prunes the oldest records until they take at most this, and
        /// the newest record is kept even when it alone is larger.
        /// Default 4 MiB: thousands of ordinary settings commits fit (10,000 small records take
        /// about 1 MiB, so ``logRetention`` governs them), while a stream of large values keeps
        /// only a few MiB of history instead of growing the file by every value written.
        public var logRetentionBytes = 4 << 20
        /// The largest value a write may store, in bytes of its encoded form (the type tag and
        /// the payload, as `pdinspect keys` shows the size). A larger value is refused with
        /// ``PersistentDefaultsError/valueTooLarge(key:size:limit:)`` before anything is written;
        /// in ``PersistentDefaults/write(_:)`` the whole transaction throws. Values already stored
        /// (by another process or an older version) are still read. At least 1.
        ///
        /// Default 64 MiB: the values of tens of megabytes that the store handles keep working,
        /// while a runaway value (a log appended to a setting, an image by mistake) is stopped
        /// before it grows the map and, through the commit log, the file.
        ///
        /// ```swift
        /// var options = PersistentDefaults.Options()
        /// options.maxValueSize = 1 << 20      // settings here are small: refuse anything over 1 MiB
        /// ```
        public var maxValueSize = 64 << 20
        /// Reader slots in the lock file (`mdb_env_set_maxreaders`), at least 1. Default 126,
        /// LMDB's default. Only the process that creates the lock file sets it.
        public var maxReaders = 126
        /// How long a read waits for a free slot in LMDB's reader table when every slot is taken,
        /// before it throws `lmdb(code: .readersFull, …)`. A thread that reads keeps its slot
        /// between reads; a process empties the slots its threads have not read through for one
        /// to two seconds, so a table that idle threads of other processes filled frees itself
        /// within that time. Default 3 s; zero throws at once. Writes take no reader slot.
        public var readerSlotWait: Duration = .seconds(3)
        /// How often a process with observers checks LMDB's transaction ID for commits that did
        /// not wake it: commits by writers that do not know the store's wake-up channel (Python's
        /// `lmdb`, versions of this library before it) and all commits when this process cannot
        /// write the channel file (read-only directory). Commits through the channel arrive in
        /// well under a millisecond whatever this is. Clamped to 1 ms … 1 hour. Default 1 second.
        public var fallbackCheckInterval: Duration = .seconds(1)
        /// Receives errors that the non-throwing API cannot throw: a subscript write that failed,
        /// a stored value that does not decode (reported once per key and reason), a background
        /// flush that failed (reported on a thread of its own, holding no lock of the library, so
        /// the handler may open, use or release stores, this one included). Default: one line on
        /// standard error.
        ///
        /// Called on the thread that met the error, but never inside a write transaction or read
        /// scope of the store: an error met inside `write { }` (a value read through `tx[key]`
        /// that does not decode, a failed `store[key] = …`) is passed once the transaction has
        /// ended, committed or not, and one met inside `read { }` (a value read through
        /// `snapshot[key]` that does not decode) once the outermost scope has ended, so the
        /// handler may write the store, also through the subscript, and reads the newest commit
        /// (inside a scope, a write could not grow the map). The same holds for every other
        /// store the thread is using: an error of this store met inside another store's
        /// `write { }` or `read { }` is passed once the thread is in no store's scope. Nor is it
        /// called inside itself: an error that its own use of the store causes on its thread is
        /// passed to it after it returns, once; one caused while it handles such an error is
        /// written to standard error instead (``printToStandardError``), so a handler whose
        /// write keeps failing — a full disk, a value over ``maxValueSize`` — cannot recurse.
        public var errorHandler: @Sendable (PersistentDefaultsError) -> Void = Options.printToStandardError

        /// Options with the defaults.
        public init() {}

        /// Whether an open with these options may create the store.
        var creates: Bool { !readOnly && createIfMissing }

        /// Writes `error` as one line to standard error.
        public static let printToStandardError: @Sendable (PersistentDefaultsError) -> Void = { error in
            FileHandle.standardError.write(Data("PersistentDefaults: \(error)\n".utf8))
        }
    }

    /// When a committed write reaches the disk.
    public enum Durability: Sendable, Equatable, CustomStringConvertible {
        /// Every commit is durable when the call returns: LMDB writes the pages, `fdatasync`s,
        /// then writes and syncs the meta page. About 120 µs per commit on a virtual disk.
        case sync
        /// Commits skip `fsync` (`MDB_NOSYNC`); a background task flushes every `interval`
        /// (clamped to 1 ms … 1 day), when the store closes, and when the process exits normally
        /// (an `atexit` handler, for stores that are never closed). A killed process loses nothing (its writes are in the page
        /// cache); a machine crash or power loss can lose the commits of the last `interval`.
        case bounded(interval: Duration)

        /// `sync` or `bounded(<interval>)`.
        public var description: String {
            switch self {
            case .sync: "sync"
            case .bounded(let interval): "bounded(\(interval))"
            }
        }
    }
}
