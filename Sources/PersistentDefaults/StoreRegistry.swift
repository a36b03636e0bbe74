import Synchronization

/// One `StoreCore` per store per process.
///
/// lmdb.h: "Do not have open an LMDB database twice in the same process at the same time" —
/// closing the second handle would drop the first one's file locks. Handles are counted under
/// one lock, so a store is closed only when its last handle goes, and an open of the same path
/// racing with that close waits for it.
///
/// A store is its `data.mdb`, not its path: the directory may have been renamed (or mounted
/// elsewhere) since it was opened, and then another path leads to the open store; or it may have
/// been removed or replaced, and then the path leads to another store, which handles of the old
/// one must not stand in for. So stores are keyed by the identity of the data file, which the
/// open environment holds (its inode number cannot be reused meanwhile).
enum StoreRegistry {
    private struct Entry {
        let core: StoreCore
        var handles: Int
    }

    private static let stores = Locked<[FileIdentity: Entry]>([:])

    /// A handle of the store at `path`, opening it unless it is open in this process, and the
    /// canonical form of `path` through which it was found (not the open store's `path` when its
    /// directory was renamed since). With `temporary`, the directory is removed when the last
    /// handle goes (see ``PersistentDefaults/temporary(options:)``).
    static func acquire(path: String, options: PersistentDefaults.Options, temporary: Bool = false) throws
        -> (core: StoreCore, path: String)
    {
        try stores.withLock { stores in
            let key = try StoreFiles.canonicalPath(path, creating: options.creates)
            if let file = StoreFiles.dataFileIdentity(in: key), var entry = stores[file] {
                let open = entry.core.options
                if open.durability != options.durability {
                    throw PersistentDefaultsError.optionsConflict(
                        path: key, reason: "open with durability \(open.durability), asked for \(options.durability)")
                }
                if open.readOnly, !options.readOnly {
                    throw PersistentDefaultsError.optionsConflict(
                        path: key, reason: "open read-only, asked for writing")
                }
                entry.handles += 1
                stores[file] = entry
                return (entry.core, key)
            }
            let core = try StoreCore(path: key, options: options, temporary: temporary)
            stores[core.environment.dataFile] = Entry(core: core, handles: 1)
            return (core, key)
        }
    }

    /// Gives back a handle of `core`; the last one closes the store. The close runs under the
    /// lock (an open of the same store waits for it), but what it leaves — ending the store's
    /// `updates` streams, which releases user values and may run their `deinit` — runs after it.
    static func release(_ core: StoreCore) {
        let afterClose = stores.withLock { stores -> (() -> Void)? in
            let file = core.environment.dataFile
            guard var entry = stores[file], entry.core === core else { return nil }
            entry.handles -= 1
            if entry.handles > 0 {
                stores[file] = entry
                return nil
            }
            stores[file] = nil
            return core.close()
        }
        afterClose?()
    }
}
