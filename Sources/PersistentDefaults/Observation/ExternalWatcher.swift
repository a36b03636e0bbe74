import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Notices commits made by other processes while a store has observers.
///
/// A thread checks every 15 ms: it reads LMDB's last transaction ID from the shared meta page (a
/// memory read, no system call); when the ID moved, it reads the snapshot's transaction ID and
/// newest log sequence and has the registry deliver what is new. Transactions that neither this
/// process nor the log account for were made by a client that bypasses the log; then the
/// observed keys are compared with the store.
///
/// Why a poll and not inotify: with an inotify watch on `data.mdb`, every `pwrite` of every
/// writer pays for a notification event; measured here, that made a set 1.4× slower for the
/// writing process as soon as one observer existed, against 1.06× with the poll. The poll costs
/// about 0.4 % of a core while idle and delivers another process's commit within 15 ms.
///
/// `@unchecked Sendable`: the counters are touched only on the watcher's thread; the file
/// descriptors are set up in `init` and closed by that thread when it ends.
final class ExternalWatcher: @unchecked Sendable {
    private weak var core: StoreCore?
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
        let thread = Thread { [self] in run() }
        thread.name = "PersistentDefaults.watch"
        thread.start()
    }

    private func run() {
        threadID.withLock { $0 = pthread_self() }
        var wakeUp = pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)
        var timeout = Self.interval
        while !isStopping.load(ordering: .acquiring) {
            // Waits out the interval; stop() ends the wait early through the pipe.
            _ = poll(&wakeUp, 1, timeout)
            if isStopping.load(ordering: .acquiring) { break }
            timeout = check() ? Self.interval : 1
        }
        for descriptor in [wake.read, wake.write] where descriptor >= 0 { close(descriptor) }
        finished.signal()
    }

    /// Milliseconds between checks.
    static let interval: Int32 = 15

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
