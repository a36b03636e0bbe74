import CLMDB

/// One entry that ``rawLMDBPut(_:_:)`` writes: a key and value in a named database.
public struct RawLMDBEntry: Sendable {
    public var database: String
    public var key: [UInt8]
    public var value: [UInt8]

    public init(database: String, key: [UInt8], value: [UInt8]) {
        self.database = database
        self.key = key
        self.value = value
    }
}

/// An LMDB call of ``rawLMDBPut(_:_:)`` that failed, with its return code.
public struct RawLMDBError: Error, CustomStringConvertible {
    public let operation: String
    public let code: Int32

    public var description: String { "\(operation) failed: \(String(cString: mdb_strerror(code))) (\(code))" }
}

private func check(_ code: Int32, _ operation: String) throws {
    guard code == 0 else { throw RawLMDBError(operation: operation, code: code) }
}

/// Writes `entries` into the LMDB environment at `path` with LMDB alone, in one transaction
/// (creating a database that is missing), as another LMDB client would: for tests of what the
/// library and `pdinspect` make of bytes they did not write.
public func rawLMDBPut(_ path: String, _ entries: [RawLMDBEntry]) throws {
    var env: OpaquePointer?
    try check(mdb_env_create(&env), "mdb_env_create")
    // lmdb.h: "mdb_env_close must be called to discard the MDB_env handle" also when the
    // open fails.
    defer { mdb_env_close(env) }
    try check(mdb_env_set_maxdbs(env, 8), "mdb_env_set_maxdbs")
    try check(mdb_env_open(env, path, 0, 0o600), "mdb_env_open")
    var txn: OpaquePointer?
    try check(mdb_txn_begin(env, nil, 0, &txn), "mdb_txn_begin")
    do {
        for entry in entries {
            var dbi: MDB_dbi = 0
            try check(mdb_dbi_open(txn, entry.database, UInt32(MDB_CREATE), &dbi), "mdb_dbi_open(\(entry.database))")
            var key = entry.key
            var value = entry.value
            let code = key.withUnsafeMutableBytes { keyBytes in
                value.withUnsafeMutableBytes { valueBytes in
                    var k = MDB_val(mv_size: keyBytes.count, mv_data: keyBytes.baseAddress)
                    var v = MDB_val(mv_size: valueBytes.count, mv_data: valueBytes.baseAddress)
                    return mdb_put(txn, dbi, &k, &v, 0)
                }
            }
            try check(code, "mdb_put")
        }
    } catch {
        mdb_txn_abort(txn)
        throw error
    }
    try check(mdb_txn_commit(txn), "mdb_txn_commit")
}

/// Opens (creating) the LMDB environment at `path` with LMDB alone and runs `body` inside a write
/// transaction, which holds LMDB's writer lock, then aborts it: another LMDB client's write.
public func rawLMDBHoldingWrite(_ path: String, _ body: () throws -> Void) throws {
    var env: OpaquePointer?
    try check(mdb_env_create(&env), "mdb_env_create")
    defer { mdb_env_close(env) }  // Also when the open fails (lmdb.h).
    try check(mdb_env_open(env, path, 0, 0o600), "mdb_env_open")
    var txn: OpaquePointer?
    try check(mdb_txn_begin(env, nil, 0, &txn), "mdb_txn_begin")
    defer { mdb_txn_abort(txn) }
    try body()
}
