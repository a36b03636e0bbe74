import CPlatform
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A file's identity: its device and inode numbers.
struct FileIdentity: Hashable, Sendable {
    var device: UInt64
    var inode: UInt64

    init(_ info: stat) {
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }

    /// The identity of the open file `descriptor`; nil when `fstat` fails (`errno` says why).
    init?(descriptor: Int32) {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return nil }
        self.init(info)
    }

    /// The identity of the file at `path`; nil when `stat` fails (`errno` says why).
    init?(path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        self.init(info)
    }
}

/// The directory and files of a store, and their permissions.
enum StoreFiles {
    static let dataFile = "data.mdb"
    static let lockFile = "lock.mdb"

    struct Prepared {
        /// Whether `data.mdb` did not exist yet, so the store is new.
        var createdData: Bool
    }

    /// Checks the store directory, creating it (mode 0700) when `creating`; without `creating`,
    /// a missing directory or data file is ``PersistentDefaultsError/notAStore(path:reason:)``.
    static func prepare(path: String, creating: Bool) throws(PersistentDefaultsError) -> Prepared {
        var info = stat()
        if stat(path, &info) != 0 {
            let error = errno
            guard error == ENOENT else { throw .fileSystem(path: path, errno: error, operation: "stat") }
            guard creating else { throw .notAStore(path: path, reason: "no such directory") }
            _ = try createDirectory(path)
        } else if info.st_mode & S_IFMT != S_IFDIR {
            throw .notAStore(path: path, reason: "not a directory")
        }
        let data = path + "/" + dataFile
        if stat(data, &info) != 0 {
            let error = errno
            guard error == ENOENT else { throw .fileSystem(path: data, errno: error, operation: "stat") }
            guard creating else { throw .notAStore(path: path, reason: "the directory has no \(dataFile)") }
            return Prepared(createdData: true)
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw .notAStore(path: path, reason: "\(dataFile) is not a file")
        }
        // Another process is creating the store, or a creation ended before its first commit:
        // an open that may create hands the file to LMDB, which waits for that creator or
        // finishes the creation. Checking the header now would refuse a store that is about to
        // exist (seen: two services starting at once, one refused "data.mdb is empty").
        if creating, DataFileHeader.isUnfinishedCreation(data, size: Int(info.st_size)) {
            // LMDB finishes an empty file but refuses one that holds only the first meta page
            // (it reads the second one short: MDB_INVALID), which a creation cut short by a full
            // disk leaves: such a file is emptied, unless a process has the store open.
            return Prepared(createdData: info.st_size > 0 && emptyUnfinishedCreation(in: path))
        }
        guard info.st_size > 0 else { throw .notAStore(path: path, reason: "\(dataFile) is empty") }
        try DataFileHeader.check(data, size: Int(info.st_size), store: path)
        return Prepared(createdData: false)
    }

    /// Empties the store's `data.mdb`, an unfinished creation of one page, when no process has
    /// the store open: when this process gets LMDB's exclusive lock on byte 0 of `lock.mdb`
    /// (mdb.c, `mdb_env_excl_lock`), which every process that has the environment open holds
    /// shared, and its creator holds exclusively until the meta pages are written. Returns
    /// whether it emptied the file.
    private static func emptyUnfinishedCreation(in path: String) -> Bool {
        let descriptor = open(path + "/" + lockFile, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return false }
        // Closing it releases the lock. This process holds no other lock on the file: the store
        // registry opens a store once per process, and not while this runs.
        defer { close(descriptor) }
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = 0
        lock.l_len = 1
        guard fcntl(descriptor, F_SETLK, &lock) == 0 else { return false }
        // Again under the lock: a creator may have finished before this process got it.
        let data = path + "/" + dataFile
        var info = stat()
        guard stat(data, &info) == 0, info.st_size > 0,
            DataFileHeader.isUnfinishedCreation(data, size: Int(info.st_size))
        else { return false }
        return truncate(data, 0) == 0
    }

    /// Creates the directory and its missing parents; the store directory itself gets 0700.
    /// Returns the directories whose entries changed: `path`, each missing parent, and the first
    /// parent that existed ("" for the working directory).
    private static func createDirectory(_ path: String) throws(PersistentDefaultsError) -> [String] {
        var changed = [path]
        var ancestor = parentDirectory(of: path)
        while !ancestor.isEmpty, ancestor != changed.last, access(ancestor, F_OK) != 0 {
            changed.append(ancestor)
            ancestor = parentDirectory(of: ancestor)
        }
        if ancestor != changed.last { changed.append(ancestor) }
        let parent = parentDirectory(of: path)
        if !parent.isEmpty, parent != path, access(parent, F_OK) != 0 {
            do {
                try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
            } catch {
                throw .fileSystem(path: parent, errno: errno == 0 ? EIO : errno, operation: "mkdir")
            }
        }
        if mkdir(path, 0o700) != 0 {
            let error = errno
            guard error == EEXIST else { throw .fileSystem(path: path, errno: error, operation: "mkdir") }
            // Made meanwhile by another opener, or a symbolic link that leads nowhere (`mkdir`
            // does not follow it; `chmod` would, and fail with "No such file or directory").
            var info = stat()
            if stat(path, &info) != 0 {
                let error = errno
                var link = stat()
                if error == ENOENT, lstat(path, &link) == 0, link.st_mode & S_IFMT == S_IFLNK {
                    throw .notAStore(path: path, reason: "a symbolic link to a missing directory")
                }
                throw .fileSystem(path: path, errno: error, operation: "stat")
            }
        }
        // mkdir applies the umask; the mode must not depend on it.
        guard chmod(path, 0o700) == 0 else { throw .fileSystem(path: path, errno: errno, operation: "chmod") }
        return changed
    }

    /// The directory that holds `path`, or "" for a relative path of one component. (Foundation's
    /// `NSString.deletingLastPathComponent` traps on Linux for a one-character name such as "s"
    /// or "s/", so it must not see user input.)
    static func parentDirectory(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed.removeLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "" }
        return slash == trimmed.startIndex ? "/" : String(trimmed[..<slash])
    }

    /// Gives newly created store files mode 0600 whatever the umask.
    static func restrictModes(in path: String) throws(PersistentDefaultsError) {
        for file in [dataFile, lockFile] {
            let full = path + "/" + file
            guard chmod(full, 0o600) == 0 || errno == ENOENT else {
                throw .fileSystem(path: full, errno: errno, operation: "chmod")
            }
        }
    }

    /// Creates the file `path` with mode 0600 whatever the umask, failing when it exists (as
    /// `mdb_env_copy2` does), and passes its descriptor to `write`. Returns once the file and its
    /// directory entry are on disk: the file is `fsync`ed, then its directory. The file is removed
    /// again when `write` or a sync throws, and closed on every path.
    ///
    /// Without the syncs a power cut soon after the return could leave an empty or partial file
    /// (or none): `mdb_env_copyfd2` only writes, and fsync(2): "Calling fsync() does not
    /// necessarily ensure that the entry in the directory containing the file has also reached
    /// disk. For that an explicit fsync() on a file descriptor for the directory is also needed."
    static func writeNewPrivateFile(_ path: String, _ write: (Int32) throws -> Void) throws {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw PersistentDefaultsError.fileSystem(path: path, errno: errno, operation: "open")
        }
        do {
            // The umask may have taken the owner's bits away from the mode given to open.
            guard fchmod(descriptor, 0o600) == 0 else {
                throw PersistentDefaultsError.fileSystem(path: path, errno: errno, operation: "fchmod")
            }
            try write(descriptor)
            guard fsync(descriptor) == 0 else {
                throw PersistentDefaultsError.fileSystem(path: path, errno: errno, operation: "fsync")
            }
        } catch {
            close(descriptor)
            unlink(path)
            throw error
        }
        guard close(descriptor) == 0 else {
            let error = errno
            unlink(path)
            throw PersistentDefaultsError.fileSystem(path: path, errno: error, operation: "close")
        }
        do {
            try syncDirectory(parentDirectory(of: path))
        } catch {
            unlink(path)
            throw error
        }
    }

    /// `fsync`s the directory `path` ("" is the working directory), so that the entries made in
    /// it are on disk. A directory this process may not read (EACCES: a parent of mode 0311
    /// lets it create a store but not open the parent) and a file system that cannot sync a
    /// directory (EINVAL) are left as they are: nothing more can be done there.
    static func syncDirectory(_ path: String) throws(PersistentDefaultsError) {
        let directory = path.isEmpty ? "." : path
        let descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else {
            if errno == EACCES { return }
            throw .fileSystem(path: directory, errno: errno, operation: "open")
        }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 || errno == EINVAL else {
            throw .fileSystem(path: directory, errno: errno, operation: "fsync")
        }
    }

    /// Gives the first `length` bytes of the open file `descriptor` disk blocks (`fallocate`,
    /// mode 0: holes are filled, the contents kept, the size raised to `length` when smaller).
    /// For files written through a shared map (`lock.mdb`, `notify`): a store into a page that
    /// the file system cannot give (a full disk) raises SIGBUS and kills the process, while a
    /// failed `fallocate` is an error code. Returns 0 or the errno; a file system without
    /// `fallocate` (EOPNOTSUPP) returns 0: nothing more can be done there.
    static func allocateBlocks(_ descriptor: Int32, length: Int) -> Int32 {
        guard length > 0 else { return 0 }
        while pd_fallocate(descriptor, 0, Int64(length)) != 0 {
            let error = errno
            if error == EINTR { continue }
            return error == EOPNOTSUPP || error == ENOSYS ? 0 : error
        }
        return 0
    }

    /// Creates `lock.mdb` in the store directory `path` with its blocks allocated, before LMDB
    /// opens it: LMDB sizes a new lock file with `ftruncate` and writes its header and reader
    /// slots through a shared map, so on a full disk the open died of SIGBUS. Throws ENOSPC
    /// (`fileSystem`) when a new lock file cannot get its blocks; the holes of an existing one are
    /// filled when space allows (its size is kept: other processes map that size). Does nothing
    /// when the file cannot be opened for writing (a read-only directory: LMDB says why).
    static func allocateLockFile(in path: String, maxReaders: Int) throws(PersistentDefaultsError) {
        let file = path + "/" + lockFile
        let descriptor = open(file, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return }
        // Closing a descriptor drops every `fcntl` lock this process holds on the file, LMDB's
        // reader lock on byte 0 included: safe only because no environment of this store is open
        // in this process here (the store registry opens a store only while it is not open, with
        // its directory marked busy).
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return }
        guard info.st_size == 0 else {
            _ = allocateBlocks(descriptor, length: Int(info.st_size))
            return
        }
        // The size LMDB gives a new lock file (mdb.c, mdb_env_setup_locks: `rsize =
        // (env->me_maxreaders-1) * sizeof(MDB_reader) + sizeof(MDB_txninfo)`; a reader slot and
        // each of the table header's two parts are padded to a 64-byte cache line).
        let size = (max(maxReaders, 1) - 1) * 64 + 192
        let error = allocateBlocks(descriptor, length: size)
        if error != 0 { throw .fileSystem(path: file, errno: error, operation: "fallocate") }
    }

    /// The identity of the store's `data.mdb` in the directory `path`; nil when it has none.
    static func dataFileIdentity(in path: String) -> FileIdentity? { FileIdentity(path: path + "/" + dataFile) }

    /// The identity of the store directory at `path`; a directory that is gone (removed since
    /// `canonicalPath` found it) is `notAStore`, as `canonicalPath` reports one missing.
    static func directoryIdentity(_ path: String) throws(PersistentDefaultsError) -> FileIdentity {
        guard let identity = FileIdentity(path: path) else {
            let error = errno
            if error == ENOENT { throw .notAStore(path: path, reason: "no such directory") }
            throw .fileSystem(path: path, errno: error, operation: "stat")
        }
        return identity
    }

    /// The canonical absolute path of the store directory (a store's `path`); the directory is
    /// created first when `creating`.
    static func canonicalPath(_ path: String, creating: Bool) throws(PersistentDefaultsError) -> String {
        var created: [String] = []
        return try canonicalPath(path, creating: creating, noting: &created)
    }

    /// `canonicalPath`, adding to `created` the canonical paths of the directories whose entries
    /// its creation of the directory changed: the directory, each missing parent it made, and
    /// the first parent that existed (for ``syncDirectory(_:)`` once the store is made).
    static func canonicalPath(_ path: String, creating: Bool, noting created: inout [String])
        throws(PersistentDefaultsError) -> String
    {
        guard !path.isEmpty else { throw .notAStore(path: path, reason: "the path is empty") }
        // A C string ends at the first NUL: every file call would see another, shorter path.
        guard !path.utf8.contains(0) else { throw .notAStore(path: path, reason: "the path contains a NUL byte") }
        if creating, access(path, F_OK) != 0 {
            for directory in try createDirectory(path) {
                if let resolved = resolvedPath(directory.isEmpty ? "." : directory) { created.append(resolved) }
            }
        }
        guard let resolved = resolvedPath(path) else {
            let error = errno
            if error == ENOENT { throw .notAStore(path: path, reason: "no such directory") }
            throw .fileSystem(path: path, errno: error, operation: "realpath")
        }
        return resolved
    }

    /// `realpath`; nil when it fails (`errno` says why).
    private static func resolvedPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
