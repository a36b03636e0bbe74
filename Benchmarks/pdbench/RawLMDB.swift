import CLMDB

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An `MDB_env *` owned by one `RawLMDB`.
typealias RawEnvironmentHandle = OpaquePointer
/// An `MDB_txn *`.
typealias RawTransactionHandle = OpaquePointer

/// An LMDB call that failed, with its return code.
struct LMDBFailure: Error, CustomStringConvertible {
    var code: Int32
    var operation: String
    var description: String { "\(operation): \(String(cString: mdb_strerror(code)))" }
}

/// The one place where the benchmark checks LMDB return codes.
@inline(__always)
func checkLMDB(_ code: Int32, _ operation: @autoclosure () -> String) throws {
    if code != MDB_SUCCESS { throw LMDBFailure(code: code, operation: operation()) }
}

/// The LMDB library version (`mdb_version`).
func lmdbLibraryVersion() -> String { String(cString: mdb_version(nil, nil, nil)) }

/// The baseline: LMDB through its C API, one unnamed database, no Swift layer in between.
final class RawLMDB {
    let environment: RawEnvironmentHandle
    private(set) var database: MDB_dbi = 0
    /// The named databases asked for at open, created when missing.
    private(set) var named: [String: MDB_dbi] = [:]
    /// A read transaction kept reset between gets and renewed for each (`mdb_txn_renew`).
    private var reader: RawTransactionHandle?

    /// Opens an environment in the existing directory `path`; `noSync` sets `MDB_NOSYNC`;
    /// `namedDatabases` are opened (and created) besides the unnamed one.
    init(path: String, noSync: Bool = false, mapSize: Int = 1 << 30, namedDatabases: [String] = []) throws {
        var created: RawEnvironmentHandle?
        try checkLMDB(mdb_env_create(&created), "mdb_env_create")
        guard let created else { throw LMDBFailure(code: EINVAL, operation: "mdb_env_create") }
        do {
            try checkLMDB(mdb_env_set_mapsize(created, mapSize), "mdb_env_set_mapsize")
            if !namedDatabases.isEmpty {
                try checkLMDB(mdb_env_set_maxdbs(created, MDB_dbi(namedDatabases.count)), "mdb_env_set_maxdbs")
            }
            var flags = MDB_NOTLS | MDB_NORDAHEAD
            if noSync { flags |= MDB_NOSYNC }
            try checkLMDB(mdb_env_open(created, path, UInt32(bitPattern: flags), 0o600), "mdb_env_open")
        } catch {
            // lmdb.h: "If this function fails, mdb_env_close() must be called to discard the MDB_env handle."
            mdb_env_close(created)
            throw error
        }
        environment = created
        do {
            try write { transaction in
                try checkLMDB(mdb_dbi_open(transaction, nil, 0, &database), "mdb_dbi_open")
                for name in namedDatabases {
                    var handle: MDB_dbi = 0
                    try checkLMDB(mdb_dbi_open(transaction, name, UInt32(MDB_CREATE), &handle), "mdb_dbi_open(\(name))")
                    named[name] = handle
                }
            }
        } catch {
            mdb_env_close(created)
            throw error
        }
    }

    deinit {
        if let reader { mdb_txn_abort(reader) }
        mdb_env_close(environment)
    }

    /// Runs `body` in a write transaction and commits it (durably unless `MDB_NOSYNC`).
    func write(_ body: (RawTransactionHandle) throws -> Void) throws {
        var begun: RawTransactionHandle?
        try checkLMDB(mdb_txn_begin(environment, nil, 0, &begun), "mdb_txn_begin")
        guard let transaction = begun else { throw LMDBFailure(code: EINVAL, operation: "mdb_txn_begin") }
        do {
            try body(transaction)
        } catch {
            mdb_txn_abort(transaction)
            throw error
        }
        try checkLMDB(mdb_txn_commit(transaction), "mdb_txn_commit")
    }

    /// Puts `value` under `key` inside a write transaction, in `database` (nil: the unnamed one).
    @inline(__always)
    func put(
        _ transaction: RawTransactionHandle, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer,
        database named: MDB_dbi? = nil
    ) throws {
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var data = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        try checkLMDB(mdb_put(transaction, named ?? database, &keyValue, &data, 0), "mdb_put")
    }

    /// One put and a commit: what a single durable set costs in LMDB itself.
    func set(key: [UInt8], value: [UInt8]) throws {
        try write { transaction in
            try key.withUnsafeBytes { key in
                try value.withUnsafeBytes { try put(transaction, key: key, value: $0) }
            }
        }
    }

    /// Reads `key` from `database` (nil: the unnamed one) with the kept read transaction renewed
    /// before and reset after; `body` sees the bytes (nil when absent) only while the
    /// transaction is live.
    @inline(__always)
    func get<R>(
        key: UnsafeRawBufferPointer, database named: MDB_dbi? = nil, _ body: (UnsafeRawBufferPointer?) throws -> R
    ) throws -> R {
        let transaction: RawTransactionHandle
        if let reader {
            try checkLMDB(mdb_txn_renew(reader), "mdb_txn_renew")
            transaction = reader
        } else {
            var begun: RawTransactionHandle?
            try checkLMDB(mdb_txn_begin(environment, nil, UInt32(MDB_RDONLY), &begun), "mdb_txn_begin")
            guard let begun else { throw LMDBFailure(code: EINVAL, operation: "mdb_txn_begin") }
            reader = begun
            transaction = begun
        }
        defer { mdb_txn_reset(transaction) }
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var data = MDB_val()
        let code = mdb_get(transaction, named ?? database, &keyValue, &data)
        if code == MDB_NOTFOUND { return try body(nil) }
        try checkLMDB(code, "mdb_get")
        return try body(UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size))
    }
}
