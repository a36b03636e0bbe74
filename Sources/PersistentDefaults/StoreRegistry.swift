import Synchronization

/// One `StoreCore` per store directory per process.
///
/// lmdb.h: "Do not have open an LMDB database twice in the same process at the same time" —
/// closing the second handle would drop the first one's file locks. Handles are counted under
/// one lock, so a store is closed only when its last handle goes, and an open of the same path
/// racing with that close waits for it.
enum StoreRegistry {
    private struct Entry {
        let core: StoreCore
        var handles: Int
    }

    private static let stores = Locked<[String: Entry]>([:])

    /// A handle of the store at `path`, opening it unless it is open in this process. With
    /// `temporary`, the directory is removed when the last handle goes (see
    /// ``PersistentDefaults/temporary(options:)``).
    static func acquire(path: String, options: PersistentDefaults.Options, temporary: Bool = false) throws
        -> StoreCore
    {
        try stores.withLock { stores in
            let key = try StoreFiles.canonicalPath(path, creating: options.creates)
            if var entry = stores[key] {
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
                stores[key] = entry
                return entry.core
            }
            let core = try StoreCore(path: key, options: options, temporary: temporary)
            stores[key] = Entry(core: core, handles: 1)
            return core
        }
    }

    static func release(_ core: StoreCore) {
        stores.withLock { stores in
            guard var entry = stores[core.path], entry.core === core else { return }
            entry.handles -= 1
            if entry.handles > 0 {
                stores[core.path] = entry
            } else {
                stores[core.path] = nil
                core.close()
            }
        }
    }
}
