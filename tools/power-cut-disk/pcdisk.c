/*
 * pcdisk: a simulated disk for the power-loss test, loaded with LD_PRELOAD into one writer
 * process (see tools/power-cut and tools/reliability/pd-power-cut-test).
 *
 * It watches every file named `data.mdb` that the process opens for writing. Each write to it
 * goes to the real file at once (so the process, LMDB and its readers see their own writes),
 * and the interposer remembers, per 512-byte sector touched since the last durable point, the
 * sector's durable content and up to PCDISK_VERSIONS (4) of its newer contents, one per write.
 * At the cut it chooses what a power loss could have left and writes that into the file, then
 * the process kills itself with SIGKILL:
 *
 *   - each write since the last durable point is kept or lost (probability p, drawn per cut:
 *     0, 1, 1/2 or uniform; PCDISK_KEEP=P fixes it), kept writes land in a random order (a random priority per write;
 *     where two kept writes touch one sector, the higher priority wins, so an older version may
 *     land last), and one kept write in eight is torn: each of its sectors is kept or lost on
 *     its own. A sector is atomic: it holds its durable content or one whole version.
 *   - the file's size becomes the durable size, extended to the end of any sector that kept a
 *     newer version (the size follows the data that reached the disk, as fdatasync orders it).
 *
 * Durable points, as Linux defines them for a local file system:
 *   - fsync, fdatasync (on any descriptor of the file), sync, syncfs: every write that returned
 *     before the call is durable when it returns. The call runs with the interposer's lock
 *     held, so writes of other threads wait for it (they cannot land half in, half out).
 *   - a write through a descriptor opened with O_DSYNC or O_SYNC (LMDB's meta-page descriptor
 *     in sync mode), or pwritev2 with RWF_DSYNC/RWF_SYNC: durable when it returns, together
 *     with the rest of each 4 KiB page it touched (the kernel writes back whole page-cache
 *     pages: vfs_fsync_range over the written range).
 *   - sync_file_range is not a durable point (it neither flushes the drive's cache nor the
 *     file's metadata); msync is passed through and not a durable point either, because the
 *     pwrite path never needs it.
 *
 * Writable shared mappings (LMDB's MDB_WRITEMAP) are refused: the process prints
 * "pcdisk: refused: …" and exits with status 97. Stores into a mapping do not pass through any
 * call that could be interposed, so this simulator models the pwrite path only.
 *
 * Not modelled: the lock file (lock.mdb is not durable state: after a reboot no process holds
 * it and the first opener rebuilds it), directory entries (creating data.mdb is taken as
 * durable), ftruncate and fallocate (passed through; LMDB 0.9.24 uses them only with
 * MDB_WRITEMAP), descriptors made by dup/dup2/fcntl(F_DUPFD) (LMDB does not dup), descriptors
 * >= 65536, writes by other processes, a drive whose cache lies about flushes, and bit rot.
 * Intermediate versions beyond the newest PCDISK_VERSIONS of a sector are forgotten, which only
 * narrows the outcomes explored.
 *
 * The cut: when the writer opens data.mdb the first time, a thread of the interposer starts
 * and sleeps until PCDISK_CUT_AFTER_US microseconds have passed (CLOCK_MONOTONIC). It then takes
 * the lock, which every write and sync of the file holds, so no write to the file is in progress
 * and none can start: that instant is the power cut. Under the lock it chooses the outcome of
 * every sector, then forks. The parent sends itself SIGKILL at once, never releasing the lock.
 * The child (only the cutting thread is copied, with the sector table) waits until the parent is
 * dead (end of file on a pipe whose write end only the parent held), then writes the chosen
 * sectors and the size into data.mdb through the interposer's own descriptor, prints one line
 * on standard error and exits. The file is not changed while the writer lives because its other
 * threads read data.mdb through LMDB's map until the SIGKILL lands: a file rewritten under them
 * is a disk that cannot exist, and LMDB asserts on it (mdb_freelist_save, seen in testing).
 * Whoever waits for the writer must also wait for end of file on its standard error, which the
 * child holds until the file is final. The line:
 *
 *   pcdisk: cut t=NS synced=NS writes=N sectors=N latest=N older=N reverted=N torn=N
 *           size=A->B meta=ahead|durable forgotten=N p=P
 *
 * (one line; t is the cut's CLOCK_MONOTONIC time, synced the start of the last durable point,
 * 0 if none; sectors counts sectors with unsynced writes, and of them latest kept their newest
 * version, older an older one, reverted their durable content; meta tells whether a meta page
 * (the first two 4 KiB pages) kept a newer version; forgotten counts versions dropped beyond
 * PCDISK_VERSIONS; p is the keep probability). Without PCDISK_CUT_AFTER_US nothing is cut.
 * PCDISK_CUT_AT_INPUT_END=1 instead cuts when the process's standard input ends (the cutting
 * thread reads it to its end), so that a test can cut right after the writer said it is done.
 * PCDISK_SEED (decimal) seeds every choice, so a cut can be repeated from its seed given the
 * same writes.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SECTOR 512
#define PAGE 4096
#define MAX_FDS 65536
#define MAX_VERSIONS 8
#define REFUSED_STATUS 97

enum kind { UNTRACKED = 0, TRACKED = 1, TRACKED_DSYNC = 2 };

struct version {
    uint64_t seq;
    unsigned char data[SECTOR];
};

struct entry {
    unsigned char durable[SECTOR];
    int count;
    struct version versions[MAX_VERSIONS];
};

/* Everything below is guarded by `lock`, except `kinds` (atomic bytes) and the function pointers. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char kinds[MAX_FDS];
static struct entry **entries;   /* indexed by sector; NULL = durable content is the file's */
static uint64_t entry_capacity;  /* length of `entries` */
static uint64_t *active;         /* the sectors with an entry */
static uint64_t active_count, active_capacity;
static uint64_t write_seq, pending_writes, forgotten;
static int64_t durable_size = -1, current_size;
static uint64_t synced_ns;
static int private_fd = -1;
static int max_versions = 4;
static uint64_t seed;
static pthread_once_t cutter_once = PTHREAD_ONCE_INIT;

static int (*real_open)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev2)(int, const struct iovec *, int, off_t, int);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static void (*real_sync)(void);
static int (*real_syncfs)(int);
static int (*real_close)(int);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mmap64)(void *, size_t, int, int, int, off_t);

static void resolve_once(void) {
    real_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    real_openat = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    real_pwrite = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    real_writev = (ssize_t(*)(int, const struct iovec *, int))dlsym(RTLD_NEXT, "writev");
    real_pwritev = (ssize_t(*)(int, const struct iovec *, int, off_t))dlsym(RTLD_NEXT, "pwritev");
    real_pwritev2 = (ssize_t(*)(int, const struct iovec *, int, off_t, int))dlsym(RTLD_NEXT, "pwritev2");
    real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    real_sync = (void (*)(void))dlsym(RTLD_NEXT, "sync");
    real_syncfs = (int (*)(int))dlsym(RTLD_NEXT, "syncfs");
    real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
    real_mmap = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
    real_mmap64 = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap64");
    real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
}

static pthread_once_t resolved = PTHREAD_ONCE_INIT;

static void resolve(void) { pthread_once(&resolved, resolve_once); }

static uint64_t now_ns(void) {
    struct timespec time;
    clock_gettime(CLOCK_MONOTONIC, &time);
    return (uint64_t)time.tv_sec * 1000000000u + (uint64_t)time.tv_nsec;
}

static void say(const char *text) {
    size_t length = strlen(text);
    while (length > 0) {
        ssize_t written = real_write(2, text, length);
        if (written <= 0) return;
        text += written;
        length -= (size_t)written;
    }
}

static _Noreturn void die(const char *why) {
    char line[256];
    snprintf(line, sizeof line, "pcdisk: failed: %s (%s)\n", why, strerror(errno));
    say(line);
    _exit(REFUSED_STATUS + 1);
}

/* SplitMix64's finaliser: a hash good enough to draw every choice from (seed, write, sector). */
static uint64_t mix(uint64_t value) {
    value += 0x9E3779B97F4A7C15u;
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9u;
    value = (value ^ (value >> 27)) * 0x94D049BB133111EBu;
    return value ^ (value >> 31);
}

static double unit(uint64_t value) { return (double)(value >> 11) / 9007199254740992.0; }

static enum kind kind_of(int fd) {
    if (fd < 0 || fd >= MAX_FDS) return UNTRACKED;
    return (enum kind)__atomic_load_n(&kinds[fd], __ATOMIC_ACQUIRE);
}

/* ---- the sector table (lock held) ---- */

static struct entry *entry_for(uint64_t sector, int create) {
    if (sector >= entry_capacity) {
        if (!create) return NULL;
        uint64_t capacity = entry_capacity ? entry_capacity : 4096;
        while (capacity <= sector) capacity *= 2;
        struct entry **grown = realloc(entries, capacity * sizeof *grown);
        if (!grown) die("out of memory");
        memset(grown + entry_capacity, 0, (capacity - entry_capacity) * sizeof *grown);
        entries = grown;
        entry_capacity = capacity;
    }
    if (entries[sector] || !create) return entries[sector];
    struct entry *entry = calloc(1, sizeof *entry);
    if (!entry) die("out of memory");
    /* The file's content now is durable: no write touched this sector since the last durable point. */
    ssize_t got = pread(private_fd, entry->durable, SECTOR, (off_t)(sector * SECTOR));
    if (got < 0) die("pread");
    if (active_count == active_capacity) {
        active_capacity = active_capacity ? active_capacity * 2 : 1024;
        uint64_t *grown = realloc(active, active_capacity * sizeof *grown);
        if (!grown) die("out of memory");
        active = grown;
    }
    active[active_count++] = sector;
    entries[sector] = entry;
    return entry;
}

static void forget_all(void) {
    for (uint64_t index = 0; index < active_count; index++) {
        free(entries[active[index]]);
        entries[active[index]] = NULL;
    }
    active_count = 0;
    pending_writes = 0;
}

/* A durable write: the sectors of every 4 KiB page it touched now hold their current content for good. */
static void make_pages_durable(off_t offset, size_t length) {
    uint64_t first = (uint64_t)offset / PAGE * (PAGE / SECTOR);
    uint64_t end = ((uint64_t)offset + length + PAGE - 1) / PAGE * (PAGE / SECTOR);
    uint64_t kept = 0;
    for (uint64_t index = 0; index < active_count; index++) {
        uint64_t sector = active[index];
        if (sector >= first && sector < end) {
            free(entries[sector]);
            entries[sector] = NULL;
        } else {
            active[kept++] = sector;
        }
    }
    active_count = kept;
    if ((int64_t)(offset + (off_t)length) > durable_size) durable_size = (int64_t)(offset + (off_t)length);
}

/* Copies `length` bytes at logical position `from` of the gathered buffers into `target`. */
static void gather(unsigned char *target, const struct iovec *iov, int count, size_t from, size_t length) {
    for (int index = 0; index < count && length > 0; index++) {
        size_t size = iov[index].iov_len;
        if (from >= size) {
            from -= size;
            continue;
        }
        size_t take = size - from < length ? size - from : length;
        memcpy(target, (const unsigned char *)iov[index].iov_base + from, take);
        target += take;
        length -= take;
        from = 0;
    }
}

/* Records a returned write of `length` bytes at `offset` as a new version of each sector it touched. */
static void record(off_t offset, const struct iovec *iov, int count, size_t length) {
    uint64_t seq = ++write_seq;
    pending_writes++;
    uint64_t first = (uint64_t)offset / SECTOR, last = ((uint64_t)offset + length - 1) / SECTOR;
    for (uint64_t sector = first; sector <= last; sector++) {
        struct entry *entry = entry_for(sector, 1);
        struct version next;
        next.seq = seq;
        memcpy(next.data, entry->count ? entry->versions[entry->count - 1].data : entry->durable, SECTOR);
        uint64_t start = sector * SECTOR > (uint64_t)offset ? sector * SECTOR : (uint64_t)offset;
        uint64_t end = (sector + 1) * SECTOR < (uint64_t)offset + length ? (sector + 1) * SECTOR
                                                                          : (uint64_t)offset + length;
        gather(next.data + (start - sector * SECTOR), iov, count, (size_t)(start - (uint64_t)offset),
               (size_t)(end - start));
        if (entry->count == max_versions) {
            memmove(&entry->versions[0], &entry->versions[1], (size_t)(max_versions - 1) * sizeof next);
            entry->count--;
            forgotten++;
        }
        entry->versions[entry->count++] = next;
    }
    if ((int64_t)(offset + (off_t)length) > current_size) current_size = (int64_t)(offset + (off_t)length);
}

/* ---- the cut ---- */

static void cut(void) {
    pthread_mutex_lock(&lock); /* never released: no write to the file can start or be in progress */
    uint64_t cut_ns = now_ns();
    uint64_t draw = mix(seed ^ 0x5EEDu);
    double keep_probability;
    switch (draw % 4) {
    case 0: keep_probability = 0; break;
    case 1: keep_probability = 1; break;
    case 2: keep_probability = 0.5; break;
    default: keep_probability = unit(mix(draw)); break;
    }
    const char *keep = getenv("PCDISK_KEEP");
    if (keep) keep_probability = atof(keep);
    uint64_t latest = 0, older = 0, reverted = 0, torn = 0;
    int meta_ahead = 0;
    int64_t new_size = durable_size;
    unsigned char *torn_seen = calloc(write_seq + 1, 1);
    const unsigned char **chosen = calloc(active_count + 1, sizeof *chosen);
    if (!torn_seen || !chosen) die("out of memory");
    for (uint64_t index = 0; index < active_count; index++) {
        uint64_t sector = active[index];
        struct entry *entry = entries[sector];
        int chosen_index = -1;
        uint64_t best = 0;
        chosen[index] = entry->durable;
        for (int version = 0; version < entry->count; version++) {
            uint64_t write = mix(seed ^ mix(entry->versions[version].seq));
            if (unit(write) >= keep_probability) continue;
            if (unit(mix(write + 1)) < 0.125) {
                if (!torn_seen[entry->versions[version].seq]) torn++;
                torn_seen[entry->versions[version].seq] = 1;
                if (mix(write ^ mix(sector + 7)) & 1) continue;
            }
            uint64_t priority = mix(write + 2);
            if (chosen_index < 0 || priority > best) {
                best = priority;
                chosen[index] = entry->versions[version].data;
                chosen_index = version;
            }
        }
        if (chosen_index < 0) {
            reverted++;
        } else {
            if (chosen_index == entry->count - 1) latest++; else older++;
            if (sector < 2 * PAGE / SECTOR) meta_ahead = 1;
            int64_t end = (int64_t)((sector + 1) * SECTOR);
            if (end > current_size) end = current_size;
            if (end > new_size) new_size = end;
        }
    }
    char line[512];
    snprintf(line, sizeof line,
             "pcdisk: cut t=%" PRIu64 " synced=%" PRIu64 " writes=%" PRIu64 " sectors=%" PRIu64 " latest=%" PRIu64
             " older=%" PRIu64 " reverted=%" PRIu64 " torn=%" PRIu64 " size=%" PRId64 "->%" PRId64
             " meta=%s forgotten=%" PRIu64 " p=%.2f\n",
             cut_ns, synced_ns, pending_writes, active_count, latest, older, reverted, torn, current_size, new_size,
             meta_ahead ? "ahead" : "durable", forgotten, keep_probability);
    /* The other threads keep running until the process dies and read data.mdb through LMDB's map, so
     * changing the file now would show them a disk that cannot be (LMDB asserts on it). A forked child
     * (a copy of this thread and of the table) waits until this process is dead, then writes the file. */
    int dead[2];
    if (pipe2(dead, O_CLOEXEC) != 0) die("pipe2");
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        real_close(dead[1]);
        char byte;
        while (read(dead[0], &byte, 1) != 0) {} /* end of file: every write end, the parent's, is closed */
        for (uint64_t index = 0; index < active_count; index++) {
            uint64_t sector = active[index];
            if ((int64_t)(sector * SECTOR) >= current_size) continue;
            size_t length = (size_t)(current_size - (int64_t)(sector * SECTOR));
            if (length > SECTOR) length = SECTOR;
            if (real_pwrite(private_fd, chosen[index], length, (off_t)(sector * SECTOR)) != (ssize_t)length) {
                die("pwrite");
            }
        }
        if (new_size < current_size && ftruncate(private_fd, new_size) != 0) die("ftruncate");
        say(line);
        _exit(0);
    }
    kill(getpid(), SIGKILL);
    for (;;) pause();
}

static void *cutter(void *argument) {
    uint64_t deadline = *(uint64_t *)argument;
    struct timespec when = {(time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &when, NULL) == EINTR) {}
    cut();
    return NULL;
}

/* PCDISK_CUT_AT_INPUT_END: cuts once standard input ends (or cannot be read). */
static void *cutter_at_input_end(void *argument) {
    (void)argument;
    char buffer[256];
    for (;;) {
        ssize_t got = read(0, buffer, sizeof buffer);
        if (got == 0 || (got < 0 && errno != EINTR)) break;
    }
    cut();
    return NULL;
}

static void start_cutter(void) {
    const char *after = getenv("PCDISK_CUT_AFTER_US");
    const char *at_input_end = getenv("PCDISK_CUT_AT_INPUT_END");
    int on_input = at_input_end && strcmp(at_input_end, "1") == 0;
    if (!after && !on_input) return;
    static uint64_t deadline;
    deadline = after ? now_ns() + strtoull(after, NULL, 10) * 1000u : 0;
    pthread_t thread;
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous); /* the thread takes no signal meant for the process */
    if (pthread_create(&thread, &attributes, on_input ? cutter_at_input_end : cutter, &deadline) != 0) {
        die("pthread_create");
    }
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    pthread_attr_destroy(&attributes);
}

/* ---- opening ---- */

static int is_data_file(const char *path) {
    const char *slash = strrchr(path, '/');
    return strcmp(slash ? slash + 1 : path, "data.mdb") == 0;
}

static void opened(int fd, const char *path, int flags) {
    if (fd < 0 || fd >= MAX_FDS || !is_data_file(path) || (flags & O_ACCMODE) == O_RDONLY) return;
    pthread_mutex_lock(&lock);
    if (private_fd < 0) {
        private_fd = real_open(path, O_RDWR | O_CLOEXEC);
        if (private_fd < 0) die("open data.mdb");
        struct stat status;
        if (fstat(private_fd, &status) != 0) die("fstat");
        durable_size = current_size = status.st_size;
        const char *versions = getenv("PCDISK_VERSIONS");
        if (versions && atoi(versions) >= 1 && atoi(versions) <= MAX_VERSIONS) max_versions = atoi(versions);
        const char *seed_text = getenv("PCDISK_SEED");
        if (seed_text) seed = strtoull(seed_text, NULL, 10);
    }
    __atomic_store_n(&kinds[fd], (flags & (O_DSYNC | O_SYNC)) ? TRACKED_DSYNC : TRACKED, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    pthread_once(&cutter_once, start_cutter);
}

static int mode_argument(int flags, va_list arguments) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(arguments, int) : 0;
}

/// open/openat and their 64-bit twins, after the variadic mode was read: one body for all four.
static int interposed_open(int directory, const char *path, int flags, int mode) {
    int fd = directory == AT_FDCWD ? real_open(path, flags, mode) : real_openat(directory, path, flags, mode);
    if (fd >= 0 && (directory == AT_FDCWD || path[0] == '/')) opened(fd, path, flags);
    return fd;
}

int open(const char *path, int flags, ...) {
    resolve();
    va_list arguments;
    va_start(arguments, flags);
    int mode = mode_argument(flags, arguments);
    va_end(arguments);
    return interposed_open(AT_FDCWD, path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    resolve();
    va_list arguments;
    va_start(arguments, flags);
    int mode = mode_argument(flags, arguments);
    va_end(arguments);
    return interposed_open(AT_FDCWD, path, flags, mode);
}

int openat(int directory, const char *path, int flags, ...) {
    resolve();
    va_list arguments;
    va_start(arguments, flags);
    int mode = mode_argument(flags, arguments);
    va_end(arguments);
    return interposed_open(directory, path, flags, mode);
}

int openat64(int directory, const char *path, int flags, ...) {
    resolve();
    va_list arguments;
    va_start(arguments, flags);
    int mode = mode_argument(flags, arguments);
    va_end(arguments);
    return interposed_open(directory, path, flags, mode);
}

int close(int fd) {
    resolve();
    if (kind_of(fd) != UNTRACKED) __atomic_store_n(&kinds[fd], UNTRACKED, __ATOMIC_RELEASE);
    return real_close(fd);
}

/* ---- writing ---- */

enum call { CALL_WRITE, CALL_PWRITE, CALL_WRITEV, CALL_PWRITEV, CALL_PWRITEV2 };

static ssize_t tracked_write(enum call call, int fd, const struct iovec *iov, int count, off_t offset, int flags) {
    resolve();
    enum kind kind = kind_of(fd);
    if (kind == UNTRACKED) {
        switch (call) {
        case CALL_WRITE: return real_write(fd, iov[0].iov_base, iov[0].iov_len);
        case CALL_PWRITE: return real_pwrite(fd, iov[0].iov_base, iov[0].iov_len, offset);
        case CALL_WRITEV: return real_writev(fd, iov, count);
        case CALL_PWRITEV: return real_pwritev(fd, iov, count, offset);
        case CALL_PWRITEV2: return real_pwritev2(fd, iov, count, offset, flags);
        }
    }
    pthread_mutex_lock(&lock);
    off_t position = offset;
    if (call == CALL_WRITE || call == CALL_WRITEV || (call == CALL_PWRITEV2 && offset == -1)) {
        position = lseek(fd, 0, SEEK_CUR);
        if (position < 0) die("lseek");
    }
    size_t total = 0;
    for (int index = 0; index < count; index++) total += iov[index].iov_len;
    /* Capture each sector's durable content before the write changes the file. */
    if (total > 0) {
        for (uint64_t sector = (uint64_t)position / SECTOR; sector <= ((uint64_t)position + total - 1) / SECTOR;
             sector++) {
            entry_for(sector, 1);
        }
    }
    ssize_t result = -1;
    switch (call) {
    case CALL_WRITE: result = real_write(fd, iov[0].iov_base, iov[0].iov_len); break;
    case CALL_PWRITE: result = real_pwrite(fd, iov[0].iov_base, iov[0].iov_len, offset); break;
    case CALL_WRITEV: result = real_writev(fd, iov, count); break;
    case CALL_PWRITEV: result = real_pwritev(fd, iov, count, offset); break;
    case CALL_PWRITEV2: result = real_pwritev2(fd, iov, count, offset, flags); break;
    }
    int saved = errno;
    if (result > 0) {
        record(position, iov, count, (size_t)result);
        int dsync = kind == TRACKED_DSYNC;
#ifdef RWF_DSYNC
        if (call == CALL_PWRITEV2 && (flags & (RWF_DSYNC | RWF_SYNC))) dsync = 1;
#endif
        if (dsync) make_pages_durable(position, (size_t)result);
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    return result;
}

ssize_t write(int fd, const void *buffer, size_t length) {
    struct iovec one = {(void *)buffer, length};
    return tracked_write(CALL_WRITE, fd, &one, 1, -1, 0);
}

ssize_t pwrite(int fd, const void *buffer, size_t length, off_t offset) {
    struct iovec one = {(void *)buffer, length};
    return tracked_write(CALL_PWRITE, fd, &one, 1, offset, 0);
}

ssize_t pwrite64(int fd, const void *buffer, size_t length, off_t offset) {
    struct iovec one = {(void *)buffer, length};
    return tracked_write(CALL_PWRITE, fd, &one, 1, offset, 0);
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    return tracked_write(CALL_WRITEV, fd, iov, count, -1, 0);
}

ssize_t pwritev(int fd, const struct iovec *iov, int count, off_t offset) {
    return tracked_write(CALL_PWRITEV, fd, iov, count, offset, 0);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int count, off_t offset) {
    return tracked_write(CALL_PWRITEV, fd, iov, count, offset, 0);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int count, off_t offset, int flags) {
    return tracked_write(CALL_PWRITEV2, fd, iov, count, offset, flags);
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int count, off_t offset, int flags) {
    return tracked_write(CALL_PWRITEV2, fd, iov, count, offset, flags);
}

/* ---- syncing ---- */

/* Runs `sync_call` with the lock held; when it succeeds every write that returned before is durable. */
static int durable_point(int (*sync_call)(int), int fd) {
    pthread_mutex_lock(&lock);
    uint64_t started = now_ns();
    int result = sync_call(fd);
    int saved = errno;
    if (result == 0 && private_fd >= 0) {
        forget_all();
        durable_size = current_size;
        synced_ns = started;
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    return result;
}

int fsync(int fd) {
    resolve();
    return kind_of(fd) == UNTRACKED ? real_fsync(fd) : durable_point(real_fsync, fd);
}

int fdatasync(int fd) {
    resolve();
    return kind_of(fd) == UNTRACKED ? real_fdatasync(fd) : durable_point(real_fdatasync, fd);
}

static int sync_everything(int fd) {
    (void)fd;
    real_sync();
    return 0;
}

void sync(void) {
    resolve();
    durable_point(sync_everything, -1);
}

int syncfs(int fd) {
    resolve();
    return durable_point(real_syncfs, fd);
}

/* ---- mappings ---- */

static void refuse_writable_map(int fd, int protection, int flags) {
    if (kind_of(fd) != UNTRACKED && (protection & PROT_WRITE) && (flags & MAP_SHARED)) {
        say("pcdisk: refused: data.mdb is mapped writable and shared (MDB_WRITEMAP); stores into the map "
            "bypass the interposer, which models the pwrite path only\n");
        _exit(REFUSED_STATUS);
    }
}

void *mmap(void *address, size_t length, int protection, int flags, int fd, off_t offset) {
    resolve();
    refuse_writable_map(fd, protection, flags);
    return real_mmap(address, length, protection, flags, fd, offset);
}

void *mmap64(void *address, size_t length, int protection, int flags, int fd, off_t offset) {
    resolve();
    refuse_writable_map(fd, protection, flags);
    return real_mmap64(address, length, protection, flags, fd, offset);
}
