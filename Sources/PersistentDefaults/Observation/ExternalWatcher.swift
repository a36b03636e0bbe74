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
/// newest log sequence and has the registry deliver what is new. Each logged commit advances
/// both by one; this process counts its own commits that wrote no log record
/// (`Environment.localUnloggedCommits`, counted in one place, after the commit). Transaction IDs
/// that neither account for were made by a client that bypasses the log; then the registry
/// compares the observed keys with the store, after delivering the logged records before them,
/// so a spurious comparison costs reads and never reorders changes.
///
/// Why a poll and not inotify: with an inotify watch on `data.mdb`, every `pwrite` of every
/// writer pays for a notification event; measured here, that made a set 1.4× slower for the
/// writing process as soon as one observer existed, against 1.06× with the poll. The poll costs
/// about 0.4 % of a core while idle and delivers another process's commit within 15 ms.
///
/// Stopping never waits for the thread, which may be running observer callbacks (that may wait
/// for the stopping thread, or open and close stores): the thread ends after its current check.
///
/// `@unchecked Sendable`: the counters are touched only on the watcher's thread; the file
/// descriptors are set up in `init` and closed in `deinit`.
final class ExternalWatcher: @unchecked Sendable {
    private weak var core: StoreCore?
    private let wake: (read: Int32, write: Int32)
    private let isStopping = Atomic<Bool>(false)
    private var lastTransaction: Int
    private var lastSequence: UInt64
    private var lastLocalUnlogged: Int

    /// Starts watching from a snapshot with `transactionID` and `sequence`, taken after
    /// `localUnlogged` was read.
    init(core: StoreCore, transactionID: Int, sequence: UInt64, localUnlogged: Int) {
        self.core = core
        (lastTransaction, lastSequence, lastLocalUnlogged) = (transactionID, sequence, localUnlogged)
        var descriptors: [Int32] = [-1, -1]
        if pipe(&descriptors) != 0 { descriptors = [-1, -1] }  // Without it, stop() cannot wake the thread early.
        wake = (descriptors[0], descriptors[1])
        let thread = Thread { [self] in run() }
        thread.name = "PersistentDefaults.watch"
        thread.start()
    }

    private func run() {
        var wakeUp = pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)
        var timeout = Self.interval
        while !isStopping.load(ordering: .acquiring) {
            // Waits out the interval; stop() ends the wait early through the pipe.
            _ = poll(&wakeUp, 1, timeout)
            if isStopping.load(ordering: .acquiring) { break }
            timeout = check() ? Self.interval : 1
        }
    }

    // The thread holds `self` while it runs, and `stop()` is called through a reference, so the
    // pipe is closed only when neither can use it any more (never under a concurrent `write`).
    deinit {
        for descriptor in [wake.read, wake.write] where descriptor >= 0 { close(descriptor) }
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
            // Read before the snapshot: every commit it counts is visible in the snapshot.
            let localUnlogged = core.environment.localUnloggedCommits.load(ordering: .acquiring)
            // The meta page can show a commit a moment before new readers see it, so count what
            // the snapshot shows; a commit not yet visible is seen on the next check.
            let (transaction, sequence) = try core.environment.withRead { ($0.id, try core.lastSequence(in: $0)) }
            // Wrapping arithmetic: foreign log keys may hold any number; they must not trap.
            let logged = Int(truncatingIfNeeded: sequence &- lastSequence)
            let unaccounted = (transaction &- lastTransaction) &- logged &- (localUnlogged &- lastLocalUnlogged)
            (lastTransaction, lastSequence, lastLocalUnlogged) = (transaction, sequence, localUnlogged)
            core.observers.deliver(upTo: sequence, compare: unaccounted != 0, core: core)
            return transaction >= latest
        } catch {
            if !isStopping.load(ordering: .acquiring) { core.reporter.reportOnce(error) }
            return true
        }
    }

    /// Ends the thread after its current check, without waiting for it.
    func stop() {
        isStopping.store(true, ordering: .releasing)
        var byte: UInt8 = 1
        // Wakes the poll at once; should the pipe be missing or full, the poll times out anyway.
        _ = write(wake.write, &byte, 1)
    }
}
