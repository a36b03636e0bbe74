import CLMDB
import CLMDBGuard

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A live LMDB transaction, valid only inside the `Environment` scope that passed it.
struct Transaction {
    let handle: TransactionHandle
    // Made only by `Environment`'s scopes.
    unowned(unsafe) let environment: Environment
    /// Whether this is the snapshot of an enclosing `read { }` on this thread, lent to a nested
    /// read that could not begin because another process grew the map (see
    /// `Environment.withRead`): it shows that scope's commit, which may not be the newest.
    /// Computed, not stored: a third field made every transaction passed on the write path
    /// larger (+1.2 % instructions a key of a 1,000-key transaction). A nested read that began
    /// has a transaction of its own, never the enclosing one.
    var isEnclosingSnapshot: Bool { environment.gate.enclosingRead == handle }

    /// The ID of the snapshot (read) or of the transaction being written. (`mdb_txn_id`)
    var id: Int { mdb_txn_id(handle) }

    /// Opens (and, in a write transaction, creates) a named database.
    func openDatabase(_ name: String, create: Bool) throws(PersistentDefaultsError) -> DatabaseHandle? {
        var database: MDB_dbi = 0
        // Guarded: the name is looked up in the main database's B-tree, where a damaged page
        // made LMDB fault (`pdinspect check` crashed on 1 of 200 power-cut stores).
        let code = pd_mdb_dbi_open_guarded(handle, name, create ? UInt32(MDB_CREATE) : 0, &database)
        if code == MDB_NOTFOUND { return nil }
        try checkGuarded(code, "mdb_dbi_open(\(name))")
        environment.noteOpened(name, as: database)
        return database
    }

    /// Passes the stored bytes of `key` (or nil) to `body`; the bytes are valid only inside `body`.
    func withValue<R>(
        _ database: DatabaseHandle, _ key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer?) throws -> R
    ) throws -> R {
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var data = MDB_val()
        let code = mdb_get(handle, database, &keyValue, &data)
        if code == MDB_NOTFOUND { return try body(nil) }
        try check(code, "mdb_get")
        return try body(UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size))
    }

    /// Stores `value` under `key`.
    func put(_ database: DatabaseHandle, _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws {
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var data = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        let code = mdb_put(handle, database, &keyValue, &data, 0)
        environment.notePut(bytes: key.count + value.count, code: code, database: database)
        try check(code, "mdb_put")
    }

    /// Stores `count` bytes under `key`, written by `fill` straight into the page LMDB reserves
    /// for them (`MDB_RESERVE`), with no buffer in between. lmdb.h: "reserve space for data of
    /// the given size, but don't copy the given data. Instead, return a pointer to the reserved
    /// space, which the caller can fill in later - before the next update operation or the
    /// transaction ends." `fill` must write all `count` bytes and update nothing.
    ///
    /// `appending`: `key` sorts after every key of the database (`MDB_APPEND`): LMDB puts it on
    /// the last page without searching, and splits a full last page by starting a new one
    /// instead of halving it; a key that does not sort last fails with `MDB_KEYEXIST`.
    func put(
        _ database: DatabaseHandle, _ key: UnsafeRawBufferPointer, reserving count: Int, appending: Bool = false,
        _ fill: (UnsafeMutableRawBufferPointer) throws -> Void
    ) throws {
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var data = MDB_val(mv_size: count, mv_data: nil)
        let flags = UInt32(MDB_RESERVE) | (appending ? UInt32(MDB_APPEND) : 0)
        let code = mdb_put(handle, database, &keyValue, &data, flags)
        environment.notePut(bytes: key.count + count, code: code, database: database)
        try check(code, "mdb_put(MDB_RESERVE)")
        guard data.mv_size == count, let start = data.mv_data else {
            throw PersistentDefaultsError.lmdb(code: .invalid, operation: "mdb_put(MDB_RESERVE) reserved no space")
        }
        try fill(UnsafeMutableRawBufferPointer(start: start, count: count))
    }

    /// Marks this write transaction as one that appended a commit-log record of the keys whose
    /// wake-up bits are `mask`.
    func noteLogged(sequence: UInt64, mask: UInt64) { environment.noteLogged(sequence: sequence, mask: mask) }

    /// Whether this write transaction has put into or deleted from `database`.
    func wrote(_ database: DatabaseHandle) -> Bool { environment.wrote(database) }

    /// Deletes `key`; returns whether it existed.
    @discardableResult
    func delete(_ database: DatabaseHandle, _ key: UnsafeRawBufferPointer) throws -> Bool {
        var keyValue = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        let code = mdb_del(handle, database, &keyValue, nil)
        if code == MDB_NOTFOUND { return false }
        environment.notePut(bytes: 0, code: code, database: database)
        try check(code, "mdb_del")
        return true
    }

    /// Deletes entries from the first one on while `shouldDelete` says so; returns how many.
    @discardableResult
    func deleteLeading(_ database: DatabaseHandle, while shouldDelete: (UnsafeRawBufferPointer) throws -> Bool)
        throws -> Int
    {
        var opened: OpaquePointer?
        try check(mdb_cursor_open(handle, database, &opened), "mdb_cursor_open")
        guard let cursor = opened else { return 0 }
        defer { mdb_cursor_close(cursor) }
        var deleted = 0
        var key = MDB_val()
        var data = MDB_val()
        while true {
            let code = guardedCursorGet(cursor, &key, &data, MDB_FIRST)
            if code == MDB_NOTFOUND { return deleted }
            try checkCursorStep(code)
            guard try shouldDelete(UnsafeRawBufferPointer(start: key.mv_data, count: key.mv_size)) else {
                return deleted
            }
            let deleteCode = mdb_cursor_del(cursor, 0)
            environment.notePut(bytes: 0, code: deleteCode, database: database)
            try check(deleteCode, "mdb_cursor_del")
            deleted += 1
        }
    }

    /// Deletes every entry of a database, keeping the database.
    func empty(_ database: DatabaseHandle) throws {
        let code = mdb_drop(handle, database, 0)
        environment.notePut(bytes: 0, code: code, database: database)
        try check(code, "mdb_drop")
    }

    /// Statistics of one database.
    func statistics(_ database: DatabaseHandle) throws -> DatabaseStatistics {
        var stat = MDB_stat()
        try check(mdb_stat(handle, database, &stat), "mdb_stat")
        return DatabaseStatistics(stat)
    }

    /// Visits entries in key order from the first key at or after `start` (or from the first or
    /// last entry), until `body` returns false. Bytes are valid only inside `body`.
    func forEach(
        _ database: DatabaseHandle, from start: UnsafeRawBufferPointer? = nil, reverse: Bool = false,
        _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        var opened: OpaquePointer?
        try check(mdb_cursor_open(handle, database, &opened), "mdb_cursor_open")
        guard let cursor = opened else { return }
        defer { mdb_cursor_close(cursor) }
        var key = MDB_val()
        var data = MDB_val()
        var operation: MDB_cursor_op
        if let start {
            key = MDB_val(mv_size: start.count, mv_data: UnsafeMutableRawPointer(mutating: start.baseAddress))
            operation = MDB_SET_RANGE
        } else {
            operation = reverse ? MDB_LAST : MDB_FIRST
        }
        while true {
            let code = guardedCursorGet(cursor, &key, &data, operation)
            if code == MDB_NOTFOUND { return }
            try checkCursorStep(code)
            let keyBytes = UnsafeRawBufferPointer(start: key.mv_data, count: key.mv_size)
            let valueBytes = UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size)
            guard try body(keyBytes, valueBytes) else { return }
            operation = reverse ? MDB_PREV : MDB_NEXT
        }
    }
}

extension Transaction {
    /// Whether the environment's main database is empty: nothing but possibly a fresh file.
    func isEmptyEnvironment() throws -> Bool {
        var main: MDB_dbi = 0
        try check(mdb_dbi_open(handle, nil, 0, &main), "mdb_dbi_open(main)")
        return try statistics(main).entries == 0
    }
}
