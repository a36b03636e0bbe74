import CLMDB
import CLMDBGuard

#if canImport(Glibc)
    import Glibc
#endif

/// Makes an assertion LMDB fails on a damaged page, inside a guarded call
/// (``guardedCursorGet(_:_:_:_:)``, the database lookups of `Transaction.openDatabase`), an error
/// of that call instead of the end of the process (`mdb_env_set_assert`); and, once per process,
/// a read fault (SIGSEGV, SIGBUS) inside one the same (``LMDBResultCode/faulted``).
///
/// LMDB trusts the pages it reads, and a damaged page — a `.bounded` store after a power cut,
/// for one — can send it through a null or wild pointer. The fault handler acts only inside a
/// guarded call on the faulting thread; any other fault puts back the handler that was there
/// before (the Swift runtime's backtracer, the app's own, or none) and faults again into it, so
/// a crash elsewhere looks as it did. Installed for every process that opens a store, not only
/// for `pdinspect`: an app that opened a store whose main database's root page a power cut left
/// unwritten died of SIGSEGV in the open (`anAppOpeningOrVerifyingADamagedStoreGetsAnError`).
func installAssertionGuard(_ env: EnvironmentHandle) throws(PersistentDefaultsError) {
    try check(pd_mdb_install_assert_callback(env), "mdb_env_set_assert")
    // Installed once (the call returns at once afterwards). Without it (sigaction failed, which
    // it cannot for these signals), a fault ends the process as it would without the library.
    _ = pd_mdb_guard_faults()
}

/// `mdb_cursor_get`, returning ``LMDBResultCode/assertionFailed`` where LMDB would have aborted
/// the process and ``LMDBResultCode/faulted`` where it faulted; ``lastAssertion`` then says which.
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
