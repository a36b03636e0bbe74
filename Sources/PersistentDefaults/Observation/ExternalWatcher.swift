import Dispatch
import Synchronization

/// Notices commits made by other processes while a store has observers.
///
/// Every 10 ms it reads LMDB's last transaction ID from the shared meta page (a memory read, no
/// system call). When the ID moved, it reads the snapshot's transaction ID and newest log sequence
/// and has the registry deliver what is new. Transactions that neither this process nor the log account for were made by a
/// client that bypasses the log; then the observed keys are compared with the store.
///
/// `@unchecked Sendable`: the counters are touched only on the watcher's serial queue; the timer
/// is thread-safe.
final class ExternalWatcher: @unchecked Sendable {
    static let interval = DispatchTimeInterval.milliseconds(10)

    private weak var core: StoreCore?
    private let queue = DispatchQueue(label: "PersistentDefaults.watch")
    private let timer: any DispatchSourceTimer
    private static let onQueue = DispatchSpecificKey<Bool>()
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
        queue.setSpecific(key: Self.onQueue, value: true)
        timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + Self.interval, repeating: Self.interval, leeway: .milliseconds(2))
        timer.setEventHandler { [weak self] in self?.check() }
        timer.resume()
    }

    private func check() {
        guard let core else { return }
        guard core.environment.info().lastTransactionID != lastTransaction else { return }
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
        } catch {
            core.reporter.report(error)
        }
    }

    /// Stops the timer and waits for a check in progress, unless called from that check.
    func stop() {
        timer.cancel()
        if DispatchQueue.getSpecific(key: Self.onQueue) == nil { queue.sync {} }
    }
}
