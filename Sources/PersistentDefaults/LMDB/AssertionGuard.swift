import CLMDB
import CLMDBGuard

#if canImport(Glibc)
    import Glibc
#endif

/// Makes an assertion LMDB fails on a damaged page, inside ``guardedCursorGet(_:_:_:_:)``, an
/// error of that call instead of the end of the process. (`mdb_env_set_assert`)
func installAssertionGuard(_ env: EnvironmentHandle) throws(PersistentDefaultsError) {
    try check(pd_mdb_install_assert_callback(env), "mdb_env_set_assert")
}

/// `mdb_cursor_get`, returning ``LMDBResultCode/assertionFailed`` where LMDB would have aborted
/// the process (and ``LMDBResultCode/faulted`` where it faulted, after
/// `guardReadsAgainstDamagedPages()`); ``lastAssertion`` then says which.
func guardedCursorGet(
    _ cursor: OpaquePointer, _ key: inout MDB_val, _ data: inout MDB_val, _ operation: MDB_cursor_op
) -> Int32 {
    pd_mdb_cursor_get_guarded(cursor, &key, &data, operation)
}

/// What stopped the last guarded call on this thread that returned ``LMDBResultCode/assertionFailed``
/// or ``LMDBResultCode/faulted``, such as `mdb.c:5921: Assertion 'IS_LEAF(mp)' failed in
/// mdb_cursor_next()` or `SIGBUS reading the map`.
var lastAssertion: String { String(cString: pd_mdb_last_assertion()) }

/// Throws for a guarded call's code, with what stopped LMDB when a guard did.
func checkGuarded(_ code: Int32, _ operation: @autoclosure () -> String) throws(PersistentDefaultsError) {
    guard code != PD_MDB_ASSERTION, code != PD_MDB_FAULT else {
        throw .lmdb(code: LMDBResultCode(rawValue: code), operation: "\(operation()) (\(lastAssertion))")
    }
    try check(code, operation())
}

/// Throws for a cursor step's code (``guardedCursorGet(_:_:_:_:)``).
func checkCursorStep(_ code: Int32) throws(PersistentDefaultsError) { try checkGuarded(code, "mdb_cursor_get") }

extension PersistentDefaults {
    /// From now on, in this whole process, a read fault (SIGSEGV, SIGBUS) inside one of the
    /// library's cursor reads ends that read with ``LMDBResultCode/faulted`` instead of the
    /// process; faults elsewhere reach the handler that was there before. LMDB trusts the pages
    /// it reads, and a damaged page can send it through a null or wild pointer. For tools that
    /// open stores which may be damaged: `pdinspect` calls it first.
    package static func guardReadsAgainstDamagedPages() throws(PersistentDefaultsError) {
        guard pd_mdb_guard_faults() == 0 else { throw .fileSystem(path: "", errno: errno, operation: "sigaction") }
    }
}
