#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Tells whether any other process has an LMDB environment open on a directory, from the fcntl
/// lock that LMDB holds on the first byte of `lock.mdb`; for a read-only open that cannot use the
/// lock file (MDB_NOLOCK).
///
/// mdb.c (0.9.24), `mdb_env_excl_lock`, called by `mdb_env_setup_locks` in every `mdb_env_open`
/// that uses the lock file: `lock_info.l_type = F_WRLCK; … l_start = 0; l_len = 1;
/// fcntl(env->me_lfd, F_SETLK, &lock_info)`, and when that fails (another process has it)
/// `lock_info.l_type = F_RDLCK; … fcntl(env->me_lfd, F_SETLKW, &lock_info)`; `mdb_env_share_locks`
/// later turns the first opener's write lock into a read lock. The lock is held until
/// `mdb_env_close` closes `me_lfd` (or the process ends). So while any process has the
/// environment open, byte 0 of `lock.mdb` carries its lock, and `F_GETLK` for a write lock on that
/// byte reports it. `F_GETLK` needs only a descriptor opened for reading, which a read-only
/// directory allows, and it ignores this process's own locks (it has none: it runs lockless).
///
/// It cannot tell a writer from a reader, so it also refuses while another reader has the
/// store open with the lock file: either could be followed by a write this process cannot see.
/// `@unchecked Sendable`: the descriptor is set in `init` and only passed to `fcntl` and `close`.
final class LockFileProbe: @unchecked Sendable {
    private let descriptor: Int32
    let lockPath: String

    /// Opens `lock.mdb` for reading; a missing lock file means no process has the store open
    /// (every LMDB process that uses it keeps it), which the probe then reports on each check by
    /// looking again.
    init(directory: String) throws(PersistentDefaultsError) {
        lockPath = directory + "/" + StoreFiles.lockFile
        let opened = open(lockPath, O_RDONLY | O_CLOEXEC)
        if opened < 0, errno != ENOENT {
            throw .fileSystem(
                path: lockPath, errno: errno,
                operation: "a read-only open without LMDB's lock file (not writable here) must read it"
                    + " to tell whether another process has the store open: open")
        }
        descriptor = opened
    }

    /// Throws when another process holds LMDB's lock on `lock.mdb`, naming it.
    func checkNoOtherProcess() throws(PersistentDefaultsError) {
        var descriptor = self.descriptor
        var opened = false
        if descriptor < 0 {
            // No lock file at open: a process that opens the store later creates one.
            descriptor = open(lockPath, O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else { return }
            opened = true
        }
        defer { if opened { closeDescriptor(descriptor) } }
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = 0
        lock.l_len = 1
        guard fcntl(descriptor, F_GETLK, &lock) == 0 else {
            throw .fileSystem(path: lockPath, errno: errno, operation: "fcntl(F_GETLK)")
        }
        guard lock.l_type == Int16(F_UNLCK) else {
            throw .fileSystem(
                path: lockPath, errno: EAGAIN,
                operation: "refused to read without LMDB's lock file (not writable here) while process"
                    + " \(lock.l_pid) has the store open and may write to it (it holds LMDB's lock on)")
        }
    }

    deinit { if descriptor >= 0 { closeDescriptor(descriptor) } }
}

/// Closes a descriptor opened only for reading; a failed close loses nothing, so it is ignored.
private func closeDescriptor(_ descriptor: Int32) { _ = close(descriptor) }
