#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension Environment {
    /// Explains an `EIO` from `mdb_txn_commit` when it was a full file system or the process's
    /// file-size limit, or returns nil.
    ///
    /// LMDB turns a short `pwrite` into `EIO` (mdb.c, `mdb_page_flush`: "short write, filesystem
    /// full?"), so a full disk would otherwise read as "Input/output error", which suggests a
    /// failing device. The data is unharmed either way: the commit did not happen.
    func diagnoseShortWrite(transactionBytes: Int) -> PersistentDefaultsError? {
        let dataFile = configuration.path + "/" + StoreFiles.dataFile
        var info = stat()
        let fileSize = stat(dataFile, &info) == 0 ? Int(info.st_size) : 0
        var limit = rlimit()
        if getrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max,
            fileSize + 2 * 65_536 > Int(clamping: limit.rlim_cur)
        {
            return .fileSystem(
                path: dataFile, errno: EFBIG, operation: "commit (the file-size limit is reached): write")
        }
        var space = statvfs()
        if statvfs(configuration.path, &space) == 0 {
            let free = Int(clamping: space.f_bavail) * Int(clamping: space.f_frsize)
            if free < 2 * transactionBytes + 64 * 65_536 {
                return .fileSystem(path: dataFile, errno: ENOSPC, operation: "commit (the file system is full): write")
            }
        }
        return nil
    }
}
