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
/// With a prefix, it passes only the changes of keys under the prefix (records without any are
/// left out). It still follows every record, not through ``PersistentDefaults/observe(prefix:queue:_:)``:
/// the prefix observer skips the commits outside its prefix, so the records it hands over have
/// gaps anyway, and a run of records pruned before this process read them looked like such a
/// skip — printed as if nothing were missing. The commit observer costs the same (both are woken
/// by every commit of another process, see the wake-up channel).
///
/// It opens the store itself, with an error handler of its own: an error that the library
/// reports while it registers the observer or delivers (a malformed log key or record) ends
/// the follow, thrown as the command's one line, instead of being printed to standard error
/// by the library's default handler — once more beside pdinspect's own line, or while the
/// command went on and exited 0.
struct CommitFollower {
    let store: PersistentDefaults
    let prefix: String?
    private let inbox = Inbox()

    /// Opens the store at `path` read-only (never creating one) for following. A store that
    /// this process has open already keeps the error handler of its first open (the library
    /// shares one store per path), so the errors go there: `pdinspect` opens only this one.
    init(opening path: String, in runner: Runner, prefix: String? = nil) throws {
        let inbox = inbox
        store = try runner.open(path, errorHandler: { inbox.report($0) })
        self.prefix = prefix
    }

    /// Passes each batch of records after `sequence` to `handle` until `handle` returns false,
    /// the deadline passes or `stop` is raised. Throws the first error the library reported
    /// meanwhile, after passing the records delivered before it was seen.
    func follow(
        after sequence: UInt64, until deadline: ContinuousClock.Instant?, stop: StopSignal,
        _ handle: ([CommitRecord]) throws -> Bool
    ) throws {
        let inbox = inbox
        inbox.wake(stop.wakeUp)
        // Registered before the log is read: every commit after the observer's start arrives in
        // the inbox, and the log read below holds everything up to (at least) that start.
        let token = store.observeCommits { inbox.append($0) }
        defer { token.cancel() }
        var cursor = sequence
        while true {
            // In batches, each its own snapshot: writers may prune the log between two of them.
            let records = try store.commits(after: cursor, limit: 1_000)
            guard let first = records.first, let last = records.last else { break }
            try Self.checkNothingPruned(after: cursor, next: first.sequence)
            cursor = last.sequence
            guard try handle(shown(records)) else { return }
        }
        while !stop.isRaised {
            var timeout = DispatchTime.distantFuture
            if let deadline {
                let left = ContinuousClock.now.duration(to: deadline)
                if left <= .zero { return }
                timeout = .now() + .nanoseconds(Int(left / .nanoseconds(1)))
            }
            let (delivered, error) = inbox.takeAll()
            let records = delivered.filter { $0.sequence > cursor }
            // The commit observer skips a record only when it could not deliver it: one pruned
            // before this process read it, or one it could not read (the error reported, which
            // then explains the gap). Several deliveries can wait here at once, so a gap can be
            // between any two records, not only before the first: those before it are passed.
            let gap = Self.firstGap(in: records, after: cursor)
            let contiguous = Array(records[..<(gap ?? records.endIndex)])
            if let last = contiguous.last {
                cursor = last.sequence
                // With a prefix, a run of commits outside it is no batch to hand over.
                let batch = shown(contiguous)
                if !batch.isEmpty { guard try handle(batch) else { return } }
            }
            if let gap {
                if let error { throw error }
                try Self.checkNothingPruned(after: cursor, next: records[gap].sequence)
            }
            if let error { throw error }
            // Signalled by each delivered record, each reported error and by SIGINT/SIGTERM.
            if records.isEmpty { _ = stop.wakeUp.wait(timeout: timeout) }
        }
    }
}

extension CommitFollower {
    /// `records` as the follower shows them: with a prefix, only the changes under it, and only
    /// the records that have some.
    private func shown(_ records: [CommitRecord]) -> [CommitRecord] {
        guard let prefix else { return records }
        return records.compactMap { $0.onlyChanges(under: prefix) }
    }

    /// The index of the first of `records` that does not follow the one before it (`cursor`
    /// for the first) by one sequence number; nil when none.
    static func firstGap(in records: [CommitRecord], after cursor: UInt64) -> Int? {
        var previous = cursor
        for (index, record) in records.enumerated() {
            if record.sequence != previous + 1 { return index }
            previous = record.sequence
        }
        return nil
    }

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

/// Records delivered by the observer and errors reported by the library, waiting for the
/// follow loop; each one signals the loop's semaphore once it has one.
///
/// `@unchecked Sendable`: `records`, `error` and `wakeUp` are touched only between `lock()`
/// and `unlock()` (an `NSLock`, which ThreadSanitizer sees).
private final class Inbox: @unchecked Sendable {
    private let lock = NSLock()
    private var records: [CommitRecord] = []
    /// The first error reported and not yet taken.
    private var error: PersistentDefaultsError?
    private var wakeUp: DispatchSemaphore?

    /// Signals `semaphore` from now on for each record and error, and once now.
    func wake(_ semaphore: DispatchSemaphore) {
        lock.withLock { wakeUp = semaphore }
        semaphore.signal()
    }

    func append(_ record: CommitRecord) {
        lock.withLock {
            records.append(record)
            return wakeUp
        }?.signal()
    }

    func report(_ reported: PersistentDefaultsError) {
        lock.withLock {
            if error == nil { error = reported }
            return wakeUp
        }?.signal()
    }

    /// The records delivered and the error reported since the last call.
    func takeAll() -> (records: [CommitRecord], error: PersistentDefaultsError?) {
        lock.withLock {
            defer { (records, error) = ([], nil) }
            return (records, error)
        }
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
