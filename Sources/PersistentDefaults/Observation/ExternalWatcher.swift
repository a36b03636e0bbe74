import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Notices commits made by other processes while a store has observers.
///
/// A thread waits in `poll` on an inotify watch of `data.mdb` (LMDB writes pages and the meta
/// page with `pwrite`, so every commit of any process wakes it), with a 25 ms timeout as a safety
/// net for writers that write through a shared map (`MDB_WRITEMAP`) and for file systems without
/// inotify (then it checks every 10 ms). A check reads LMDB's last transaction ID from the meta
/// page (a memory read); when it moved, it reads the snapshot's transaction ID and newest log
/// sequence and has the registry deliver what is new. Transactions that neither this process nor
/// the log account for were made by a client that bypasses the log; then the observed keys are
/// compared with the store. Idle, it costs about 40 wake-ups a second.
///
/// `@unchecked Sendable`: the counters are touched only on the watcher's thread; the file
/// descriptors are set up in `init` and closed by that thread when it ends.
final class ExternalWatcher: @unchecked Sendable {
    private weak var core: StoreCore?
    private let inotify: Int32
    private let wake: (read: Int32, write: Int32)
    private let finished = DispatchSemaphore(value: 0)
    private let threadID = Mutex<pthread_t?>(nil)
    private let isStopping = Atomic<Bool>(false)
    private var lastTransaction: Int
    private var lastSequence: UInt64
    private var lastLocalCommits: Int
    private var lastLocalLogged: Int

    init(core: StoreCore) {
        self.core = core
        // A failed read starts from zero: the first check then compares every observed key with
        // the store, which is correct, only slower.
        let snapshot = try? core.environment.withRead { ($0.id, try core.lastSequence(in: $0)) }
        (lastTransaction, lastSequence) = snapshot ?? (0, 0)
        lastLocalCommits = core.environment.localCommits.load(ordering: .relaxed)
        lastLocalLogged = core.localLoggedCommits.load(ordering: .relaxed)
        var descriptors: [Int32] = [-1, -1]
        if pipe(&descriptors) != 0 { descriptors = [-1, -1] }  // Without it, stop() cannot wake the thread early.
        wake = (descriptors[0], descriptors[1])
        var watch = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        if watch >= 0, inotify_add_watch(watch, core.path + "/" + StoreFiles.dataFile, UInt32(IN_MODIFY)) < 0 {
            close(watch)
            watch = -1
        }
        inotify = watch
        let thread = Thread { [self] in run() }
        thread.name = "PersistentDefaults.watch"
        thread.start()
    }

    private func run() {
        threadID.withLock { $0 = pthread_self() }
        var descriptors = [pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
        if inotify >= 0 { descriptors.append(pollfd(fd: inotify, events: Int16(POLLIN), revents: 0)) }
        let idleTimeout: Int32 = inotify >= 0 ? 25 : 10
        var timeout = idleTimeout
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let ready = poll(&descriptors, nfds_t(descriptors.count), timeout)
            if isStopping.load(ordering: .acquiring) || (ready > 0 && descriptors[0].revents != 0) { break }
            if ready > 0, descriptors.count > 1, descriptors[1].revents != 0 {
                // Drain the events; one check covers them all.
                while read(inotify, &buffer, buffer.count) > 0 {}
            }
            timeout = check() ? idleTimeout : 1
        }
        for descriptor in [inotify, wake.read, wake.write] where descriptor >= 0 { close(descriptor) }
        finished.signal()
    }

    /// Delivers what other processes committed; returns false when LMDB's meta page shows a
    /// commit that a new snapshot does not see yet, so that the caller checks again soon.
    private func check() -> Bool {
        guard let core else { return true }
        let latest = core.environment.info().lastTransactionID
        guard latest != lastTransaction else { return true }
        do {
            // The meta page can show a commit a moment before new readers see it, so count what
            // the snapshot shows; a commit not yet visible is seen on the next check.
            let (transaction, sequence) = try core.environment.withRead { ($0.id, try core.lastSequence(in: $0)) }
            let localCommits = core.environment.localCommits.load(ordering: .relaxed)
            let localLogged = core.localLoggedCommits.load(ordering: .relaxed)
            let logged = Int(sequence) - Int(lastSequence)
            let local = localCommits - lastLocalCommits
            let unaccounted = (transaction - lastTransaction) - local - (logged - (localLogged - lastLocalLogged))
            (lastTransaction, lastSequence) = (transaction, sequence)
            (lastLocalCommits, lastLocalLogged) = (localCommits, localLogged)
            core.observers.deliver(upTo: sequence, core: core)
            if unaccounted > 0 { core.observers.requestResynchronizing(core: core) }
            return transaction >= latest
        } catch {
            core.reporter.report(error)
            return true
        }
    }

    /// Stops the thread and waits for it, unless called from it (a callback that cancelled the
    /// last observation); then the thread ends after the current check.
    func stop() {
        isStopping.store(true, ordering: .releasing)
        var byte: UInt8 = 1
        // Wakes the poll at once; should the pipe be missing or full, the poll times out anyway.
        _ = write(wake.write, &byte, 1)
        let onWatcher = threadID.withLock { id in id.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
        if !onWatcher { finished.wait() }
    }
}
