import CLMDB
import CLMDBGuard

/// A return code of an LMDB call, kept raw so that nothing is lost.
///
/// Negative values are LMDB's own codes (`MDB_*`); positive values are `errno` values that
/// LMDB passed through, such as `ENOSPC` or `EACCES`.
public struct LMDBResultCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The C return code.
    public let rawValue: Int32

    /// Wraps a C return code.
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The library's own description of the code, from `mdb_strerror`.
    public var description: String {
        switch self {
        case .assertionFailed: return "LMDB stopped on one of its internal assertions: a page of the store is damaged"
        case .faulted: return "LMDB faulted reading the store: a page of the store is damaged"
        default: break
        }
        return String(cString: mdb_strerror(rawValue))
    }

    /// The key/data pair already exists. (`MDB_KEYEXIST`)
    public static let keyExists = Self(rawValue: MDB_KEYEXIST)
    /// The key was not found. (`MDB_NOTFOUND`)
    public static let notFound = Self(rawValue: MDB_NOTFOUND)
    /// A requested page was not found; usually corruption. (`MDB_PAGE_NOTFOUND`)
    public static let pageNotFound = Self(rawValue: MDB_PAGE_NOTFOUND)
    /// A located page was of the wrong type. (`MDB_CORRUPTED`)
    public static let corrupted = Self(rawValue: MDB_CORRUPTED)
    /// The environment had a fatal error. (`MDB_PANIC`)
    public static let panic = Self(rawValue: MDB_PANIC)
    /// The environment was written by an incompatible LMDB version. (`MDB_VERSION_MISMATCH`)
    public static let versionMismatch = Self(rawValue: MDB_VERSION_MISMATCH)
    /// The file is not a valid LMDB file. (`MDB_INVALID`)
    public static let invalid = Self(rawValue: MDB_INVALID)
    /// The memory map is full. (`MDB_MAP_FULL`)
    public static let mapFull = Self(rawValue: MDB_MAP_FULL)
    /// Too many named databases. (`MDB_DBS_FULL`)
    public static let databasesFull = Self(rawValue: MDB_DBS_FULL)
    /// The reader table is full. (`MDB_READERS_FULL`)
    public static let readersFull = Self(rawValue: MDB_READERS_FULL)
    /// A transaction has too many dirty pages. (`MDB_TXN_FULL`)
    public static let transactionFull = Self(rawValue: MDB_TXN_FULL)
    /// Another process grew the map beyond this process's mapping. (`MDB_MAP_RESIZED`)
    public static let mapResized = Self(rawValue: MDB_MAP_RESIZED)
    /// The operation and the database are incompatible. (`MDB_INCOMPATIBLE`)
    public static let incompatible = Self(rawValue: MDB_INCOMPATIBLE)
    /// A reader slot was reused wrongly. (`MDB_BAD_RSLOT`)
    public static let badReaderSlot = Self(rawValue: MDB_BAD_RSLOT)
    /// The transaction must abort or is invalid. (`MDB_BAD_TXN`)
    public static let badTransaction = Self(rawValue: MDB_BAD_TXN)
    /// A key or value has an unsupported size. (`MDB_BAD_VALSIZE`)
    public static let badValueSize = Self(rawValue: MDB_BAD_VALSIZE)
    /// A database handle changed unexpectedly. (`MDB_BAD_DBI`)
    public static let badDatabaseHandle = Self(rawValue: MDB_BAD_DBI)
    /// LMDB failed one of its internal assertions while reading a damaged page. LMDB itself
    /// aborts the process there; the library's guarded reads (the open's database lookups,
    /// iterating keys, the log, `verify()`, `pdinspect`) turn it into this code instead. Not one
    /// of LMDB's codes.
    public static let assertionFailed = Self(rawValue: PD_MDB_ASSERTION)
    /// LMDB faulted (SIGSEGV, SIGBUS) following a damaged page inside one of the library's
    /// guarded reads (the open's database lookups, iterating keys, the log, `verify()`), which
    /// the library ends with this code instead of letting the fault end the process. Reads of
    /// single values (`store[key]`) are not guarded. Not one of LMDB's codes.
    public static let faulted = Self(rawValue: PD_MDB_FAULT)
}
