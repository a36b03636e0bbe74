import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Notices commits made by other processes while a store has observers.
///
/// A thread sleeps on the store's wake-up channel (``WakeChannel``: a futex word in the file
/// `notify` that every writer of this library advances after each commit) and, when woken or
/// after `Options.fallbackCheckInterval`, checks: it reads LMDB's last transaction ID from the
/// shared meta page (a memory read, no system call); when the ID moved, it reads the snapshot's
/// transaction ID and newest log sequence and has the registry deliver what is new. Each logged
/// commit advances both by one; this process records the IDs of its own commits and which of
/// them wrote no log record (``LocalCommits``, recorded in one place, after the commit).
/// Transaction IDs that neither account for were made by a client that bypasses the log; then
/// the registry compares the observed keys with the store, after delivering the logged records
/// before them, so a spurious comparison costs reads and never reorders changes.
///
/// The timed check is the fallback for writers that do not know the channel (Python's `lmdb`,
/// older versions of this library) and for processes that cannot write the channel file; they
/// then wait on a word private to the process, which only `stop()` moves.
///
/// Why not inotify: with an inotify watch on `data.mdb`, every `pwrite` of every writer pays for
/// a notification event; measured here, that made a set 1.4× slower for the writing process as
/// soon as one observer existed. The channel costs a writer one compare-and-swap per commit and a
/// `FUTEX_WAKE` only when a process sleeps on it.
///
/// Stopping never waits for the thread, which may be running observer callbacks (that may wait
/// for the stopping thread, or open and close stores): the thread ends after its current check.
///
/// The watcher holds its store core strongly. A weak reference would give the core a side
/// table, and every retain and release of it would then take the runtime's slow path — measured:
/// ~785 instructions more per `set` as soon as the store had one observer. The cycle this makes
/// (core → observer registry → watcher → core) is broken by `StoreCore.close()`, which the last
/// handle's release calls: it stops the watcher, whose thread ends and lets go of it.
///
/// `@unchecked Sendable`: the counters are touched only on the watcher's thread; the channel is
/// itself Sendable and kept alive by the watcher while the thread may use it.
final class ExternalWatcher: @unchecked Sendable {
    private let core: StoreCore
    /// This process's slot of the store's channel, or a private word when it cannot be used.
    private let channel: WakeChannel.Waiter
    private let fallbackNanoseconds: Int64
    private let isStopping = Atomic<Bool>(false)
    private var lastTransaction: Int
    private var lastSequence: UInt64

    /// Starts watching from a snapshot with `transactionID` and `sequence`.
    init(core: StoreCore, waiter: WakeChannel.Waiter, transactionID: Int, sequence: UInt64) {
        self.core = core
        (lastTransaction, lastSequence) = (transactionID, sequence)
        channel = waiter
        let interval = core.options.fallbackCheckInterval
        fallbackNanoseconds = min(max(interval, .milliseconds(1)), .seconds(3_600)).nanoseconds
        let thread = Thread { [self] in run() }
        thread.name = "PersistentDefaults.watch"
        thread.start()
    }

    private func run() {
        var commitsKeepComing = false
        while true {
            if commitsKeepComing {
                // Let the next commits gather, sleeping without announcing it: meanwhile the
                // writers find no sleeper and make no FUTEX_WAKE.
                var pause = timespec(tv_sec: 0, tv_nsec: Int(Self.gatherNanoseconds))
                nanosleep(&pause, nil)
            }
            // Read the word before checking: a commit after this read moves the word, so the
            // wait below returns at once and the next round sees the commit.
            let seen = channel.current()
            if isStopping.load(ordering: .acquiring) { break }
            // A commit the meta page shows but a new snapshot does not see yet: look again soon.
            let timeout = check() ? fallbackNanoseconds : Self.retryNanoseconds
            if isStopping.load(ordering: .acquiring) { break }
            let started = ContinuousClock.now
            channel.wait(from: seen, timeoutNanoseconds: timeout)
            commitsKeepComing = ContinuousClock.now - started < Self.gather
        }
    }

    /// While commits that concern this process arrive less than this apart, the watcher waits
    /// this long between checks instead of sleeping on the channel after each one, and delivers
    /// what gathered in one snapshot. Woken for every commit of a writer in a burst (one every
    /// 6 µs), it used ~56 % of a core and slowed that writer by 1.27–1.33× (pdbench, the set of
    /// an observed key alternated with that of an unobserved one); gathering brings that to
    /// 1.00–1.02×. A commit after a quiet spell is still delivered at once (p50 ≈ 80 µs); in a
    /// burst, delivery waits up to this much longer.
    static let gather: Duration = .microseconds(100)
    private static let gatherNanoseconds = gather.nanoseconds

    /// How soon to check again when the meta page is ahead of a new snapshot.
    static let retryNanoseconds: Int64 = 1_000_000

    /// Delivers what other processes committed; returns false when LMDB's meta page shows a
    /// commit that a new snapshot does not see yet, so that the caller checks again soon.
    private func check() -> Bool {
        let latest = core.environment.info().lastTransactionID
        guard latest != lastTransaction else {
            // A key observer registered inside `read { }` that waits for records to be read
            // again (see `ObserverRegistry.register`; its registration woke this thread), or a
            // delivery whose read failed: retried here, at the latest after the fallback interval.
            if core.observers.hasWaitingWork { core.observers.deliver(upTo: lastSequence, core: core) }
            return true
        }
        do {
            // The meta page can show a commit a moment before new readers see it, so count what
            // the snapshot shows; a commit not yet visible is seen on the next check.
            let (transaction, sequence) = try core.environment.withRead { ($0.id, try core.lastSequence(in: $0)) }
            guard transaction > lastTransaction else { return transaction >= latest }
            // The log ends before where it ended: another client removed its newest records,
            // and the numbers up to the old end are being used again. Not trusted as delivered.
            let wentBack = sequence < lastSequence
            if wentBack {
                core.reporter.reportOnce(
                    PersistentDefaultsError.corruptLogRecord(
                        sequence: sequence,
                        reason: "the log's newest sequence went back from \(lastSequence) to \(sequence) "
                            + "(another client removed records); observers compare their keys with the store"))
                core.observers.rewind(to: sequence)
            }
            // This process's commits in the snapshot, by ID: one recorded after this count is
            // taken for another process's (a spare delivery), and none is counted twice.
            let local = core.environment.localCommitIDs.count(in: (lastTransaction + 1)...transaction)
            // Wrapping arithmetic: foreign log keys may hold any number; they must not trap.
            let logged = Int(truncatingIfNeeded: sequence &- lastSequence)
            let unaccounted = (transaction &- lastTransaction) &- logged &- local.unlogged
            // At least the number of other processes' commits: zero means every new one is this
            // process's own, which its committing threads deliver (the channel also wakes this
            // thread for them). Delivering here too would be correct but would take the delivery
            // away from those threads.
            let foreign = (transaction &- lastTransaction) &- local.all
            (lastTransaction, lastSequence) = (transaction, sequence)
            // Other processes' logged commits that the wake-up channel shows to be of no
            // interest here are passed without reading the log: an idle observer of a busy
            // store then reads no records, and holds no snapshot while reading them.
            if wentBack || unaccounted != 0 || (foreign != 0 && !core.observers.pass(through: sequence, core: core))
                || core.observers.hasWaitingWork
            {
                core.observers.deliver(upTo: sequence, compare: wentBack || unaccounted != 0, core: core)
            }
            return transaction >= latest
        } catch {
            if !isStopping.load(ordering: .acquiring) { core.reporter.reportOnce(error) }
            return true
        }
    }

    /// Ends the thread after its current check, without waiting for it.
    func stop() {
        isStopping.store(true, ordering: .sequentiallyConsistent)
        // Moves the word after the flag: the thread either sees the flag after its next read
        // of the word, or its wait returns at once (or is woken). The word is this process's
        // own slot: no other process wakes.
        channel.wake()
    }
}

extension Duration {
    /// The duration in whole nanoseconds, as futex and `nanosleep` timeouts take it.
    package var nanoseconds: Int64 { components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000 }
}
