import CLMDB

/// A cursor on one database of a write transaction, which finds a key and then overwrites or
/// deletes it where it stands: one B-tree descent per key instead of two (`mdb_get`, then
/// `mdb_put`'s own search). In C, a logged 1,000-key transaction took 272 µs with `mdb_get` +
/// `mdb_put` per key and 126 µs with this (`Benchmarks/floors/logged-transaction.c`); keys near
/// each other need no descent at all, since LMDB first looks on the cursor's current page.
///
/// lmdb.h: "A cursor in a write-transaction can be closed before its transaction ends, and will
/// otherwise be closed when its transaction ends." Close it before then: closing it afterwards
/// frees it twice.
struct WriteCursor {
    private let cursor: OpaquePointer
    private let database: DatabaseHandle
    private let transaction: Transaction
    /// The transaction's environment, called without a retain: it outlives every transaction
    /// of it (a cursor lives inside one), and a retain and release per put cost ~40
    /// instructions a key of a transaction (callgrind).
    private let environment: Unmanaged<Environment>

    init(_ database: DatabaseHandle, in transaction: Transaction) throws(PersistentDefaultsError) {
        var opened: OpaquePointer?
        try check(mdb_cursor_open(transaction.handle, database, &opened), "mdb_cursor_open")
        guard let opened else { throw .lmdb(code: .invalid, operation: "mdb_cursor_open returned no cursor") }
        cursor = opened
        self.database = database
        self.transaction = transaction
        environment = Unmanaged.passUnretained(transaction.environment)
    }

    /// Closes the cursor; call before the transaction ends, and once.
    func close() { mdb_cursor_close(cursor) }

    /// Moves to `key` and passes its stored bytes to `body`, or nil when it is absent; the bytes
    /// are valid only inside `body`. After a nil the cursor stands nowhere useful.
    func find<R>(_ key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer?) throws -> R) throws -> R {
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var data = MDB_val()
        let code = mdb_cursor_get(cursor, &keyValue, &data, MDB_SET_KEY)
        if code == MDB_NOTFOUND { return try body(nil) }
        try check(code, "mdb_cursor_get")
        return try body(UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size))
    }

    /// Stores `value` under `key`. `atKey`: the cursor stands on `key`, which exists (the last
    /// `find` found it, or the last `put` wrote it, and nothing moved the cursor since), so the
    /// value is replaced without a search (`MDB_CURRENT`). Afterwards the cursor stands on `key`.
    @inline(__always)
    func put(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, atKey: Bool) throws {
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var data = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        let code = mdb_cursor_put(cursor, &keyValue, &data, atKey ? UInt32(MDB_CURRENT) : 0)
        environment._withUnsafeGuaranteedRef {
            $0.notePut(bytes: key.count + value.count, code: code, database: database)
        }
        try check(code, "mdb_cursor_put")
    }

    /// Deletes `key`; returns whether it existed. `atKey` as for `put`. Afterwards the cursor
    /// stands nowhere useful.
    @discardableResult
    func delete(_ key: UnsafeRawBufferPointer, atKey: Bool) throws -> Bool {
        guard atKey else { return try transaction.delete(database, key) }
        let code = mdb_cursor_del(cursor, 0)
        environment._withUnsafeGuaranteedRef { $0.notePut(bytes: 0, code: code, database: database) }
        try check(code, "mdb_cursor_del")
        return true
    }
}
