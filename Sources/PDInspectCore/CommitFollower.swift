import Dispatch
import Foundation
import PersistentDefaults
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Follows a store's commit log, for `watch` and `log --follow`: the records already logged,
/// then each new one as the library's commit observer delivers it (``PersistentDefaults/observeCommits(queue:_:)``),
/// so another process's commit is printed as fast as any observer gets it.
///
/// With a prefix, it follows through ``PersistentDefaults/observe(prefix:queue:_:)`` and passes
/// only the changes of keys under the prefix (records without any are left out).
struct CommitFollower {
    let store: PersistentDefaults
    var prefix: String? = nil

    /// Passes each batch of records after `sequence` to `handle` until `handle` returns false,
    /// the deadline passes or `stop` is raised.
    func follow(
        after sequence: UInt64, until deadline: ContinuousClock.Instant?, stop: StopSignal,
        _ handle: ([CommitRecord]) throws -> Bool
    ) throws {
        let inbox = Inbox()
        let wakeUp = stop.wakeUp
        // Registered before the log is read: every commit after the observer's start arrives in
        // the inbox, and the log read below holds everything up to (at least) that start.
        let deliver: @Sendable (CommitRecord) -> Void = { record in
            inbox.append(record)
            wakeUp.signal()
        }
        let token = prefix.map { store.observe(prefix: $0, deliver) } ?? store.observeCommits(deliver)
        defer { token.cancel() }
        var cursor = sequence
        while true {
            // In batches, each its own snapshot: writers may prune the log between two of them.
            let records = try store.commits(after: cursor, limit: 1_000)
            guard let first = records.first, let last = records.last else { break }
            try Self.checkNothingPruned(after: cursor, next: first.sequence)
            cursor = last.sequence
            let shown = prefix.map { prefix in records.compactMap { $0.onlyChanges(under: prefix) } } ?? records
            guard try handle(shown) else { return }
        }
        while !stop.isRaised {
            var timeout = DispatchTime.distantFuture
            if let deadline {
                let left = ContinuousClock.now.duration(to: deadline)
                if left <= .zero { return }
                timeout = .now() + .nanoseconds(Int(left / .nanoseconds(1)))
            }
            let records = inbox.takeAll().filter { $0.sequence > cursor }
            guard let first = records.first, let last = records.last else {
                // Signalled by each delivered record and by SIGINT/SIGTERM.
                _ = wakeUp.wait(timeout: timeout)
                continue
            }
            // The commit observer skips only records pruned before this process read them (a
            // prefix observer also every commit that changed no key under the prefix).
            if prefix == nil { try Self.checkNothingPruned(after: cursor, next: first.sequence) }
            cursor = last.sequence
            guard try handle(records) else { return }
        }
    }
}

extension CommitFollower {
    /// Throws when the record that follows `cursor` is not the next sequence number: the ones
    /// between were pruned (``PersistentDefaults/Options/logRetention``) before this reader got
    /// them. A log's sequence numbers have no gaps (each commit logs the last one + 1), so a gap
    /// is always a loss, which must not look like a quiet spell.
    static func checkNothingPruned(after cursor: UInt64, next: UInt64) throws {
        guard next - cursor > 1 else { return }
        throw CommandFailure(
            .failure,
            "records #\(cursor + 1)…#\(next - 1) were pruned from the log before they could be read; "
                + "nothing from #\(next) on was printed")
    }
}

extension CommitRecord {
    /// The record with only the changes of keys whose names start with `prefix` (as bytes);
    /// nil when there are none, as the prefix observer would not deliver it.
    func onlyChanges(under prefix: String) -> CommitRecord? {
        let bytes = Array(prefix.utf8)
        let kept = changes.filter { $0.key.utf8.starts(with: bytes) }
        guard !kept.isEmpty else { return nil }
        return CommitRecord(sequence: sequence, timestamp: timestamp, processID: processID, changes: kept)
    }
}

/// Records delivered by the observer, waiting for the follow loop.
///
/// `@unchecked Sendable`: `records` is touched only between `lock()` and `unlock()` (an
/// `NSLock`, which ThreadSanitizer sees).
private final class Inbox: @unchecked Sendable {
    private let lock = NSLock()
    private var records: [CommitRecord] = []

    func append(_ record: CommitRecord) {
        lock.lock()
        defer { lock.unlock() }
        records.append(record)
    }

    func takeAll() -> [CommitRecord] {
        lock.lock()
        defer { lock.unlock() }
        defer { records.removeAll() }
        return records
    }
}

/// Raised by SIGINT or SIGTERM, so that a follow loop ends cleanly with exit code 0.
///
/// `@unchecked Sendable`: the dispatch sources are set up once in `init` and only kept alive;
/// the flag is an `Atomic`.
final class StopSignal: @unchecked Sendable {
    private let raised = Atomic<Bool>(false)
    private var sources: [any DispatchSourceSignal] = []
    /// Signalled when the signal is raised; a follow loop waits on it (its observer signals it
    /// too, for each new record).
    let wakeUp = DispatchSemaphore(value: 0)

    /// Starts listening for `signals` (SIGINT and SIGTERM; a test passes none).
    init(signals: [Int32] = [SIGINT, SIGTERM]) {
        for number in signals {
            // The default action would kill the process; the dispatch source handles it instead.
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in
                self?.raised.store(true, ordering: .releasing)
                self?.wakeUp.signal()
            }
            source.resume()
            sources.append(source)
        }
    }

    var isRaised: Bool { raised.load(ordering: .acquiring) }
}
