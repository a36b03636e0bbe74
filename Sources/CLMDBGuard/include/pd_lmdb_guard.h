#ifndef PD_LMDB_GUARD_H
#define PD_LMDB_GUARD_H
#include <lmdb.h>

// LMDB's internal assertions, turned into an error code where a read asks for it.
//
// Debian's LMDB is built with its assertions on: on a damaged page (a power cut under MDB_NOSYNC,
// a truncated copy) a cursor step can fail one, and LMDB then calls the environment's assert
// callback and aborts the process. A guarded call sets a jump point on its thread first; the
// callback jumps back to it, so the call returns PD_MDB_ASSERTION instead of ending the process.
// Only LMDB's own C frames are skipped; the caller then ends the transaction as after any other
// error. With no guarded call active on the thread the callback returns and LMDB aborts, as it
// would without it.

/// What a guarded call returns when LMDB stopped on an internal assertion (outside LMDB's own
/// codes, -30799 to -30780, and outside errno values).
#define PD_MDB_ASSERTION (-30700)

/// What a guarded call returns when the read faulted (SIGSEGV or SIGBUS) while
/// pd_mdb_guard_faults was in force: LMDB followed a damaged page.
#define PD_MDB_FAULT (-30701)

/// From now on a fault inside a guarded call on any thread ends that call with PD_MDB_FAULT; a
/// fault anywhere else goes to the disposition that was in place before (the Swift backtracer,
/// the default). Process-wide; the library calls it when it opens a store. A store may be damaged
/// (a `.bounded` store after a power cut).
/// Returns 0, or -1 with errno from sigaction.
int pd_mdb_guard_faults(void);

/// Makes `env`'s assertions jump back to a guarded call on the failing thread. (`mdb_env_set_assert`)
int pd_mdb_install_assert_callback(MDB_env *env);

/// `mdb_cursor_get`, returning PD_MDB_ASSERTION where LMDB would have aborted (and PD_MDB_FAULT
/// where it faulted, under pd_mdb_guard_faults). A byte in every 4 KiB of the key and the data it
/// found is read before it returns, so a record reaching past the end of the file faults in here.
int pd_mdb_cursor_get_guarded(MDB_cursor *cursor, MDB_val *key, MDB_val *data, MDB_cursor_op op);

/// `mdb_dbi_open`, guarded as pd_mdb_cursor_get_guarded is: it looks the name up in the main
/// database's B-tree, which on a damaged page can fail an assertion or fault. (Nothing of the
/// lookup is kept when it stops: the caller aborts the transaction.)
int pd_mdb_dbi_open_guarded(MDB_txn *txn, const char *name, unsigned int flags, MDB_dbi *dbi);

/// What stopped the last guarded call on this thread that returned PD_MDB_ASSERTION or
/// PD_MDB_FAULT, such as "mdb.c:5921: Assertion 'IS_LEAF(mp)' failed in mdb_cursor_next()".
const char *pd_mdb_last_assertion(void);
#endif
