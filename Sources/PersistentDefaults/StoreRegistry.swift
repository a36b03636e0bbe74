import Foundation

/// One `StoreCore` per store per process.
///
/// lmdb.h: "Do not have open an LMDB database twice in the same process at the same time" —
/// closing the second handle would drop the first one's file locks. Handles are counted under
/// one lock, so a store is closed only when its last handle goes, and an open of the same store
/// racing with that close waits for it.
///
/// A store is its `data.mdb`, not its path: the directory may have been renamed (or mounted
/// elsewhere) since it was opened, and then another path leads to the open store; or it may have
/// been removed or replaced, and then the path leads to another store, which handles of the old
/// one must not stand in for. So stores are keyed by the identity of the data file, which the
/// open environment holds (its inode number cannot be reused meanwhile).
///
/// Opening and closing a store run outside the lock: an open that creates a store waits for
/// LMDB's writer lock, that is for any other process's write transaction, and a `.bounded`
/// store's last close syncs the disk. Under the lock, either held up every open and close of
/// every other store in this process (`aStoreCreationWaitingForAnotherProcesssWriteHoldsUpNoOtherStore`).
/// Instead the store's directory is marked busy meanwhile, and an open through any path to that
/// directory (its device and inode, which a rename or a bind mount keeps) waits until it is not.
enum StoreRegistry {
    private struct Entry {
        let core: StoreCore
        var handles: Int
        /// The directory the store was opened in, marked busy during its last close.
        let directory: FileIdentity
    }

    private struct State {
        var stores: [FileIdentity: Entry] = [:]
        /// Directories with an open or a last close in progress, with how many of each.
        var busy: [FileIdentity: Int] = [:]

        mutating func markBusy(_ directory: FileIdentity) { busy[directory, default: 0] += 1 }

        mutating func unmarkBusy(_ directory: FileIdentity) {
            if let count = busy[directory], count > 1 { busy[directory] = count - 1 } else { busy[directory] = nil }
        }
    }

    /// The registry's lock and the condition an open waits on while its directory is busy.
    ///
    /// `@unchecked Sendable`: `state` is read and written only between `condition.lock()` and
    /// `condition.unlock()` (`NSCondition` is a `pthread` mutex and condition variable).
    private final class Registry: @unchecked Sendable {
        let condition = NSCondition()
        var state = State()
    }

    private static let registry = Registry()

    /// A handle of the store at `path`, opening it unless it is open in this process, and the
    /// canonical form of `path` through which it was found (not the open store's `path` when its
    /// directory was renamed since). With `temporary`, the directory is removed when the last
    /// handle goes (see ``PersistentDefaults/temporary(options:)``).
    static func acquire(path: String, options: PersistentDefaults.Options, temporary: Bool = false) throws
        -> (core: StoreCore, path: String)
    {
        let condition = registry.condition
        condition.lock()
        defer { condition.unlock() }
        // The directories this open made, to sync once the store exists.
        var created: [String] = []
        while true {
            // Again after each wait: the busy store may have been a temporary one, whose close
            // removed the directory.
            let key = try StoreFiles.canonicalPath(path, creating: options.creates, noting: &created)
            let directory = try StoreFiles.directoryIdentity(key)
            if registry.state.busy[directory] != nil {
                condition.wait()
                continue
            }
            if let file = StoreFiles.dataFileIdentity(in: key), var entry = registry.state.stores[file] {
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
                registry.state.stores[file] = entry
                return (entry.core, key)
            }
            let opened = outsideTheLock(busy: directory) {
                Result {
                    try StoreCore(path: key, options: options, temporary: temporary, createdDirectories: created)
                }
            }
            let core = try opened.get()
            registry.state.stores[core.environment.dataFile] = Entry(core: core, handles: 1, directory: directory)
            return (core, key)
        }
    }

    /// Gives back a handle of `core`; the last one closes the store, outside the lock with its
    /// directory marked busy (an open of the same store waits for the close). What the close
    /// leaves — ending the store's `updates` streams, which releases user values and may run
    /// their `deinit` — runs after that.
    static func release(_ core: StoreCore) {
        let condition = registry.condition
        condition.lock()
        let file = core.environment.dataFile
        guard var entry = registry.state.stores[file], entry.core === core else {
            condition.unlock()
            return
        }
        entry.handles -= 1
        if entry.handles > 0 {
            registry.state.stores[file] = entry
            condition.unlock()
            return
        }
        registry.state.stores[file] = nil
        let afterClose = outsideTheLock(busy: entry.directory) { core.close() }
        condition.unlock()
        afterClose()
    }

    /// Runs `body` with `directory` marked busy and the lock let go; call it holding the lock,
    /// which it holds again when it returns, after waking the opens that wait for the directory.
    private static func outsideTheLock<R>(busy directory: FileIdentity, _ body: () -> R) -> R {
        registry.state.markBusy(directory)
        registry.condition.unlock()
        let result = body()
        registry.condition.lock()
        registry.state.unmarkBusy(directory)
        registry.condition.broadcast()
        return result
    }
}
