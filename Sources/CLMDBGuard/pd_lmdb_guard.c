#include "pd_lmdb_guard.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>

typedef struct {
    jmp_buf jump;
} guard;

static _Thread_local guard *volatile active_guard;
static _Thread_local char stop_message[320];

static void assert_callback(MDB_env *env, const char *message) {
    (void)env;
    guard *const current = active_guard;
    if (current == NULL) return;  // LMDB prints the message and aborts, as without the callback.
    strncpy(stop_message, message, sizeof stop_message - 1);
    stop_message[sizeof stop_message - 1] = 0;
    active_guard = NULL;
    longjmp(current->jump, 1);
}

int pd_mdb_install_assert_callback(MDB_env *env) { return mdb_env_set_assert(env, assert_callback); }

static struct sigaction previous_segv, previous_bus;

static void fault_handler(int signal, siginfo_t *info, void *context) {
    (void)info;
    (void)context;
    guard *const current = active_guard;
    if (current != NULL) {
        // Only async-signal-safe work here: copy a constant message and jump.
        const char *text = signal == SIGBUS ? "SIGBUS reading the map"
                                            : "SIGSEGV reading the map";
        strncpy(stop_message, text, sizeof stop_message - 1);
        active_guard = NULL;
        // SA_NODEFER left the signal unblocked, so no mask needs restoring after the jump.
        longjmp(current->jump, 2);
    }
    // Not inside a guarded call: put back what was there and return; the instruction faults
    // again and reaches it.
    sigaction(signal, signal == SIGBUS ? &previous_bus : &previous_segv, NULL);
}

int pd_mdb_guard_faults(void) {
    static int installed;
    if (__atomic_exchange_n(&installed, 1, __ATOMIC_ACQ_REL)) return 0;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = fault_handler;
    action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, &previous_segv) != 0) return -1;
    if (sigaction(SIGBUS, &action, &previous_bus) != 0) return -1;
    return 0;
}

/// Reads one byte in every 4 KiB of `value` and its last byte: a record that a damaged page sends
/// past the end of the file (SIGBUS) or of the map (SIGSEGV, or into another mapping past
/// a hole) faults here.
static void touch(const MDB_val *value) {
    const volatile unsigned char *bytes = value->mv_data;
    for (size_t offset = 0; offset < value->mv_size; offset += 4096) (void)bytes[offset];
    if (value->mv_size > 0) (void)bytes[value->mv_size - 1];
}

/// Runs `body(context)` with a jump point set on this thread: an LMDB assertion or (under
/// pd_mdb_guard_faults) a fault inside it ends it with PD_MDB_ASSERTION or PD_MDB_FAULT. The
/// jump point lives in this frame, which stays alive while `body` runs.
static int run_guarded(int (*body)(void *context), void *context) {
    guard point;
    guard *const outer = active_guard;
    const int stopped = setjmp(point.jump);
    if (stopped != 0) {
        active_guard = outer;
        return stopped == 1 ? PD_MDB_ASSERTION : PD_MDB_FAULT;
    }
    active_guard = &point;
    const int code = body(context);
    active_guard = outer;
    return code;
}

typedef struct {
    MDB_cursor *cursor;
    MDB_val *key;
    MDB_val *data;
    MDB_cursor_op op;
} cursor_get_call;

static int cursor_get(void *context) {
    const cursor_get_call *call = context;
    const int code = mdb_cursor_get(call->cursor, call->key, call->data, call->op);
    if (code == MDB_SUCCESS) {
        // A damaged page can give a record a size or an overflow page past the end of the file:
        // its bytes are reached here, under the guard, before the caller copies them.
        touch(call->key);
        touch(call->data);
    }
    return code;
}

int pd_mdb_cursor_get_guarded(MDB_cursor *cursor, MDB_val *key, MDB_val *data, MDB_cursor_op op) {
    cursor_get_call call = {cursor, key, data, op};
    return run_guarded(cursor_get, &call);
}

typedef struct {
    MDB_txn *txn;
    const char *name;
    unsigned int flags;
    MDB_dbi *dbi;
} dbi_open_call;

static int dbi_open(void *context) {
    const dbi_open_call *call = context;
    return mdb_dbi_open(call->txn, call->name, call->flags, call->dbi);
}

int pd_mdb_dbi_open_guarded(MDB_txn *txn, const char *name, unsigned int flags, MDB_dbi *dbi) {
    dbi_open_call call = {txn, name, flags, dbi};
    return run_guarded(dbi_open, &call);
}

const char *pd_mdb_last_assertion(void) { return stop_message; }
