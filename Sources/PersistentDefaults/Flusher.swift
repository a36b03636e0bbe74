import Dispatch
import Foundation
import Synchronization

/// Flushes a `bounded` store's commits to disk in the background and at a normal exit.
///
/// What needs flushing is read from `Environment.localCommits`, which every commit of this
/// process that changed pages advances (logged or not: store creation, migrations, `write { }`
/// that changed nothing logged), so a missed `markDirty()` can delay a flush, never lose one.
///
/// The timer is one-shot: `markDirty()`, called after every commit, arms it for `interval` later
/// unless it is armed already, so a commit is flushed at most `interval` after it returned, and
/// a store with nothing to flush wakes nobody (no timer runs while idle).
///
/// A store that is never released (a global, `PersistentDefaults.standard`) never reaches
/// `stop()`, so every live flusher is also listed for an `atexit` handler that syncs them all
/// when the process exits normally (return from `main`, `exit()`).
///
/// `@unchecked Sendable`: the dispatch queue is thread-safe and set up once in `init`; the
/// rest is `Atomic`s and Sendable references.
final class Flusher: @unchecked Sendable {
    private let environment: Environment
    private let reporter: ErrorReporter
    private let queue = DispatchQueue(label: "PersistentDefaults.flush")
    private let interval: DispatchTimeInterval
    /// `environment.localCommits` as of the last successful sync.
    private let syncedCommits = Atomic<Int>(0)
    /// Whether a flush is scheduled and has not yet read `localCommits`.
    private let armed = Atomic<Bool>(false)
    private let isStopped = Atomic<Bool>(false)
    /// Every flusher not yet stopped, for the exit handler. Held only to insert, remove or copy,
    /// never across I/O, so the exiting thread cannot wait on it for long.
    private static let live = Locked<[ObjectIdentifier: Flusher]>([:])
    /// Registers the exit handler once per process, on first use.
    private static let exitHandler: Void = {
        // Ignored on purpose: atexit fails only when its table is full; the timer and close
        // still flush, and `flush()` remains the caller's explicit guarantee.
        _ = atexit { Flusher.flushAllAtExit() }
    }()
    /// How long the exit handler waits for a store that another thread holds exclusively (a map
    /// growth or a close in progress) before it gives up on that store and lets the process exit.
    static let exitTimeout = 2.0

    init(environment: Environment, interval: Duration, reporter: ErrorReporter) {
        self.environment = environment
        self.reporter = reporter
        // Between 1 ms and one day: no overflow for absurd intervals, no busy loop for tiny ones.
        let seconds = min(max(interval / .seconds(1), 0.001), 86_400)
        self.interval = .nanoseconds(Int(seconds * 1e9))
        _ = Self.exitHandler
        Self.live.withLock { $0[ObjectIdentifier(self)] = self }
        markDirty()  // The store's creation, if this open made it.
    }

    /// Arms the timer unless it is armed. Sequentially consistent on both sides (with the
    /// commit counter's increment and `fire`'s load): a commit either finds the timer armed
    /// before it reads the counter, or arms the next one.
    func markDirty() {
        guard !armed.exchange(true, ordering: .sequentiallyConsistent) else { return }
        queue.asyncAfter(deadline: .now() + interval) { [weak self] in self?.fire() }
    }

    private func fire() {
        armed.store(false, ordering: .sequentiallyConsistent)
        guard !isStopped.load(ordering: .acquiring) else { return }
        flush()
    }

    private func flush() {
        let commits = environment.localCommits.load(ordering: .sequentiallyConsistent)
        guard commits != syncedCommits.load(ordering: .acquiring) else { return }
        do {
            try environment.sync()
            syncedCommits.store(commits, ordering: .releasing)
        } catch {
            reportAsynchronously(error)
            markDirty()  // Try again an interval later.
        }
    }

    /// Passes a failed flush to the error handler on a thread of its own. `flush()` runs on the
    /// flusher's queue, or in `stop()` under the store registry's lock while the last handle
    /// closes the store, and the handler is the app's code, which may open, use or release
    /// stores: a handler that released the store's last handle on the queue made `stop()` wait
    /// for the queue it ran on (libdispatch traps), and one that opened a store during a close
    /// waited for the registry's lock that its own thread held.
    private func reportAsynchronously(_ error: any Error) {
        let failure = error as? PersistentDefaultsError ?? .unknown(description: "\(error)")
        DispatchQueue.global().async { [reporter] in reporter.report(failure) }
    }

    /// Stops the timer and flushes what is left.
    func stop() {
        Self.live.withLock { $0[ObjectIdentifier(self)] = nil }
        isStopped.store(true, ordering: .releasing)
        queue.sync { flush() }
    }

    /// The exit handler: syncs every store with unsynced commits. It runs on the exiting thread
    /// while other threads may still be writing; `mdb_env_sync` takes no LMDB lock, and the
    /// environment's gate is tried with a timeout (`exitTimeout`), so a thread that holds it
    /// exclusively cannot hang the exit. A commit that another thread completes after this sync
    /// was never acknowledged before the exit began.
    private static func flushAllAtExit() {
        let flushers = live.withLock { Array($0.values) }
        for flusher in flushers {
            let commits = flusher.environment.localCommits.load(ordering: .acquiring)
            guard commits != flusher.syncedCommits.load(ordering: .acquiring) else { continue }
            do {
                if try flusher.environment.syncAtExit(timeout: exitTimeout) {
                    flusher.syncedCommits.store(commits, ordering: .releasing)
                }
            } catch {
                flusher.reporter.report(error)
            }
        }
    }
}
