#ifndef CPLATFORM_SHIM_H
#define CPLATFORM_SHIM_H
// What Swift cannot call by itself, for the store's wake-up channel: C11 atomics on a word in
// memory mapped from a file (Synchronization.Atomic cannot live at a raw address), and the
// variadic futex system call. Each function is a thin static inline wrapper.
#include <stdint.h>
#include <errno.h>
#include <time.h>
#include <signal.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <fcntl.h>
#endif

/// Loads the 32-bit word at `word` (sequentially consistent).
static inline uint32_t pd_atomic_load_u32(const uint32_t *word) {
    return __atomic_load_n(word, __ATOMIC_SEQ_CST);
}

/// Replaces `*word` with `desired` if it holds `expected`; returns whether it did.
static inline int pd_atomic_cas_u32(uint32_t *word, uint32_t expected, uint32_t desired) {
    return __atomic_compare_exchange_n(word, &expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/// Replaces `*word` with `desired` if it holds `expected`; returns whether it did.
static inline int pd_atomic_cas_u64(uint64_t *word, uint64_t expected, uint64_t desired) {
    return __atomic_compare_exchange_n(word, &expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/// Stores `value` in the 32-bit word at `word` (sequentially consistent).
static inline void pd_atomic_store_u32(uint32_t *word, uint32_t value) {
    __atomic_store_n(word, value, __ATOMIC_SEQ_CST);
}

/// Stores `value` in the 64-bit word at `word` (sequentially consistent).
static inline void pd_atomic_store_u64(uint64_t *word, uint64_t value) {
    __atomic_store_n(word, value, __ATOMIC_SEQ_CST);
}

/// Sets the bits of `bits` in the 64-bit word at `word` (sequentially consistent).
static inline void pd_atomic_or_u64(uint64_t *word, uint64_t bits) {
    __atomic_fetch_or(word, bits, __ATOMIC_SEQ_CST);
}

/// Loads the 64-bit word at `word` (sequentially consistent).
static inline uint64_t pd_atomic_load_u64(const uint64_t *word) {
    return __atomic_load_n(word, __ATOMIC_SEQ_CST);
}

/// Takes (`lock` nonzero) or releases an open-file-description write lock on the byte at
/// `offset` of `descriptor`, without waiting (F_OFD_SETLK); returns whether it did. The kernel
/// releases it when the description closes, also when the process dies, and it does not depend
/// on process IDs, so it tells a live owner from a dead one across PID namespaces. Elsewhere
/// it always succeeds.
static inline int pd_ofd_lock_byte(int descriptor, int64_t offset, int lock) {
#ifdef __linux__
#ifndef F_OFD_SETLK
#define F_OFD_SETLK 37
#endif
    struct flock range = {0};
    range.l_type = lock ? F_WRLCK : F_UNLCK;
    range.l_whence = SEEK_SET;
    range.l_start = offset;
    range.l_len = 1;
    range.l_pid = 0;
    return fcntl(descriptor, F_OFD_SETLK, &range) == 0;
#else
    (void)descriptor; (void)offset; (void)lock;
    return 1;
#endif
}

/// Whether this platform has futexes; elsewhere `pd_futex_wait` sleeps and `pd_futex_wake` does nothing.
static inline int pd_futex_available(void) {
#ifdef __linux__
    return 1;
#else
    return 0;
#endif
}

/// Sleeps while `*word == expected`, at most `timeout_ns` nanoseconds (FUTEX_WAIT on a shared
/// word: no FUTEX_PRIVATE_FLAG, so a word in a MAP_SHARED file mapping works across processes).
/// Returns 0 when woken, otherwise -1 with errno (EAGAIN: the word differed; ETIMEDOUT; EINTR).
static inline int pd_futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_ns) {
    struct timespec timeout = {(time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000)};
#ifdef __linux__
    return (int)syscall(SYS_futex, word, FUTEX_WAIT, expected, &timeout, NULL, 0);
#else
    // Other platforms poll: the caller checks again after the timeout.
    (void)word;
    (void)expected;
    nanosleep(&timeout, NULL);
    errno = ETIMEDOUT;
    return -1;
#endif
}

/// Wakes every thread of every process waiting on `word` (FUTEX_WAKE, shared); returns how many
/// it woke, or -1 with errno.
static inline int pd_futex_wake_all(uint32_t *word) {
#ifdef __linux__
    return (int)syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
#else
    (void)word;
    return 0;
#endif
}

/// Whether the process `pid` exists (kill with signal 0; EPERM means it exists as another user's).
static inline int pd_process_exists(int32_t pid) {
    return kill(pid, 0) == 0 || errno == EPERM;
}

/// Wakes at most one thread waiting on `word` (FUTEX_WAKE, shared); returns how many it woke.
static inline int pd_futex_wake_one(uint32_t *word) {
#ifdef __linux__
    return (int)syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0);
#else
    (void)word;
    return 0;
#endif
}

/// fallocate(2) with mode 0 (give the range disk blocks, keep the contents), called as the system
/// call: Swift does not see glibc's declaration (it needs _GNU_SOURCE), and `posix_fallocate`
/// emulates an unsupported call by writing a byte into every block, which a file that other
/// processes write through a shared map must not have. Returns 0, or -1 with errno set
/// (EOPNOTSUPP where there is no such call).
static inline int pd_fallocate(int fd, int64_t offset, int64_t length) {
#ifdef __linux__
    return (int)syscall(SYS_fallocate, fd, 0, offset, length);
#else
    errno = EOPNOTSUPP;
    return -1;
#endif
}

#endif
