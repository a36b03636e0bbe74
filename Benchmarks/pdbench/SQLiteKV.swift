import CSQLite

/// A `sqlite3 *`, owned by one `SQLiteKV`.
typealias SQLiteConnection = OpaquePointer
/// A `sqlite3_stmt *`, finalized by the `SQLiteKV` that prepared it.
typealias SQLiteStatement = OpaquePointer

/// A SQLite call that failed.
struct SQLiteFailure: Error, CustomStringConvertible {
    var code: Int32
    var message: String
    var description: String { "SQLite error \(code): \(message)" }
}

/// A key-value table in SQLite, WAL mode, read and written through prepared statements.
final class SQLiteKV {
    private let connection: SQLiteConnection
    private var select: SQLiteStatement?
    private var upsert: SQLiteStatement?

    /// `SQLITE_TRANSIENT`: SQLite copies the bound bytes (the macro does not import).
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    /// Opens (creating) `path`; `synchronous` is `FULL` or `NORMAL`.
    init(path: String, synchronous: String) throws {
        var opened: SQLiteConnection?
        let code = sqlite3_open_v2(path, &opened, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil)
        guard code == SQLITE_OK, let opened else {
            // sqlite3.h: "Whether or not an error occurs when it is opened, resources associated
            // with the database connection handle should be released by passing it to sqlite3_close()".
            sqlite3_close(opened)
            throw SQLiteFailure(code: code, message: "sqlite3_open_v2(\(path))")
        }
        connection = opened
        do {
            try execute("PRAGMA journal_mode=WAL")
            try execute("PRAGMA synchronous=\(synchronous)")
            try execute("CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
            select = try prepare("SELECT v FROM kv WHERE k = ?1")
            upsert = try prepare("INSERT INTO kv (k, v) VALUES (?1, ?2) ON CONFLICT(k) DO UPDATE SET v = excluded.v")
        } catch {
            sqlite3_finalize(select)
            sqlite3_finalize(upsert)
            sqlite3_close(opened)
            throw error
        }
    }

    deinit {
        sqlite3_finalize(select)
        sqlite3_finalize(upsert)
        sqlite3_close(connection)
    }

    private func check(_ code: Int32, _ expected: Int32 = SQLITE_OK) throws {
        if code != expected {
            throw SQLiteFailure(code: code, message: String(cString: sqlite3_errmsg(connection)))
        }
    }

    /// Runs SQL that returns no rows the caller needs.
    func execute(_ sql: String) throws {
        try check(sqlite3_exec(connection, sql, nil, nil, nil))
    }

    private func prepare(_ sql: String) throws -> SQLiteStatement {
        var statement: SQLiteStatement?
        try check(sqlite3_prepare_v2(connection, sql, -1, &statement, nil))
        guard let statement else { throw SQLiteFailure(code: SQLITE_MISUSE, message: "empty statement") }
        return statement
    }

    /// Stores `value` under `key` in its own (autocommit) transaction.
    func set(key: String, value: [UInt8]) throws {
        guard let upsert else { return }
        defer { sqlite3_reset(upsert) }
        try check(sqlite3_bind_text(upsert, 1, key, -1, Self.transient))
        try value.withUnsafeBytes { bytes in
            try check(sqlite3_bind_blob(upsert, 2, bytes.baseAddress, Int32(bytes.count), Self.transient))
        }
        try check(sqlite3_step(upsert), SQLITE_DONE)
    }

    /// Passes the stored bytes of `key` (nil when absent) to `body`, valid only inside it.
    func get<R>(key: String, _ body: (UnsafeRawBufferPointer?) throws -> R) throws -> R {
        guard let select else { return try body(nil) }
        defer { sqlite3_reset(select) }
        try check(sqlite3_bind_text(select, 1, key, -1, Self.transient))
        let code = sqlite3_step(select)
        if code == SQLITE_DONE { return try body(nil) }
        try check(code, SQLITE_ROW)
        let count = Int(sqlite3_column_bytes(select, 0))
        return try body(UnsafeRawBufferPointer(start: sqlite3_column_blob(select, 0), count: count))
    }
}

/// The SQLite library version.
func sqliteLibraryVersion() -> String { String(cString: sqlite3_libversion()) }
