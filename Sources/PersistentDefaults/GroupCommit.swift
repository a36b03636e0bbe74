import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Coalesces single-key writes that wait for each other into one durable transaction.
///
/// In `.sync` mode every commit costs an `fdatasync`, and LMDB lets one writer commit at a time.
/// When several threads set keys at once, the first becomes the leader: it takes every request
/// queued so far, applies them in order in one write transaction and commits it once, so one
/// sync covers them all. Once the commit returned, the leader hands the lead to the next queued
/// request and answers the others; only then does anybody deliver to observers, so a callback
/// that waits for another thread's `set` never waits for a lead it holds itself. Every caller
/// of the batch then asks the registry to deliver (one of them, or a thread already delivering,
/// does it, in commit order), and returns.
///
/// A request whose own input is wrong (a bad key name, a value that cannot be encoded or is
/// larger than `Options.maxValueSize`) fails alone: it is validated before it joins, and an
/// error of that kind inside the batch fails only its request. When the transaction itself fails
/// (an LMDB or I/O error: a full disk or map, a file-size limit), which one large request can
/// cause alone, each request of the batch is committed again on its own, in order: those that
/// fit commit, each with its own record, and only those that do not fail. A thread that writes
/// while it leads (a key hook writing the store) writes directly.
///
/// The locks are Foundation's (`NSLock`, `NSCondition`, both `pthread` based) rather than
/// `Synchronization.Mutex`, so that ThreadSanitizer, which cannot see the prebuilt `Mutex`, can
/// check this hand-off.
final class GroupCommit: Sendable {
    /// How one request's batch ended.
    struct Outcome {
        /// The request's error: its own, or the transaction's.
        var error: (any Error)?
        /// The batch's log record, to deliver; nil when the batch failed or changed nothing.
        var record: CommitRecord?
    }

    /// One queued write and, once its batch is done, how it ended.
    final class Request: @unchecked Sendable {
        // @unchecked Sendable: `operation` and `sizeHint` are immutable; the rest is guarded by
        // `condition`.
        let operation: @Sendable (WriteTransaction) throws -> Void
        let sizeHint: Int
        private let condition = NSCondition()
        private var isAnswered = false
        private var outcome = Outcome()
        private var leads = false

        init(sizeHint: Int, operation: @escaping @Sendable (WriteTransaction) throws -> Void) {
            self.sizeHint = sizeHint
            self.operation = operation
        }

        /// Tells the waiting caller how its batch ended, or that it leads the next batch.
        func answer(_ outcome: Outcome? = nil, leads: Bool = false) {
            condition.lock()
            defer { condition.unlock() }
            if leads { self.leads = true }
            if let outcome { self.outcome = outcome }
            isAnswered = true
            condition.signal()
        }

        /// Waits for ``answer(_:leads:)``; returns whether the caller now leads the next
        /// batch (its outcome is then set by that batch; see ``result``).
        func waitForAnswer() -> Bool {
            condition.lock()
            defer { condition.unlock() }
            while !isAnswered { condition.wait() }
            isAnswered = false
            return leads
        }

        /// The outcome recorded by the batch that held this request.
        var result: Outcome {
            condition.lock()
            defer { condition.unlock() }
            return outcome
        }
    }

    private struct State {
        var queue: [Request] = []
        /// Whether a thread leads, or is being handed the lead.
        var isLeading = false
        /// The leading thread; nil while the lead is being handed over.
        var leader: pthread_t?
    }

    private let lock = NSLock()
    // Guarded by `lock`.
    nonisolated(unsafe) private var state = State()

    private func withState<R>(_ body: (inout State) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&state)
    }

    /// Runs `operation` in a write transaction, possibly together with other threads' requests,
    /// then delivers the commit to observers. `operation` must have validated its input.
    func perform(
        core: StoreCore, sizeHint: Int, _ operation: @escaping @Sendable (WriteTransaction) throws -> Void
    ) throws {
        // Errors reported inside a batch this thread led reach the handler once it has handed
        // the lead on (see `ErrorReporter`).
        defer { core.reporter.deliverDeferred() }
        let request = Request(sizeHint: sizeHint, operation: operation)
        let role = withState { state -> Role in
            if state.isLeading {
                if let leader = state.leader, pthread_equal(leader, pthread_self()) != 0 { return .direct }
                state.queue.append(request)
                return .follow
            }
            state.isLeading = true
            state.queue.append(request)
            return .lead
        }
        switch role {
        case .direct:
            try core.write(sizeHint: sizeHint) { try operation($0) }
            return
        case .follow:
            if request.waitForAnswer() { lead(core) }
        case .lead:
            lead(core)
        }
        let outcome = request.result
        if let record = outcome.record { core.observers.didCommit(record, core: core) }
        if let error = outcome.error { throw error }
    }

    private enum Role {
        case lead, follow, direct
    }

    /// Commits one batch, hands the lead to the first request queued meanwhile and answers the
    /// batch's requests (the leader's own included: it reads its answer when this returns).
    private func lead(_ core: StoreCore) {
        let batch = withState { state in
            state.leader = pthread_self()
            defer { state.queue.removeAll() }
            return state.queue
        }
        let outcomes: [Outcome]
        do {
            outcomes = try commit(batch, core)
        } catch let batchError {
            // Requests that fit alone are not failed by one that does not (a full disk, say).
            outcomes =
                batch.count == 1
                ? [Outcome(error: batchError)]
                : batch.map { request in
                    do { return try commit([request], core)[0] } catch { return Outcome(error: error) }
                }
        }
        let next = withState { state -> Request? in
            state.leader = nil
            guard let first = state.queue.first else {
                state.isLeading = false
                return nil
            }
            return first
        }
        next?.answer(leads: true)
        for (request, outcome) in zip(batch, outcomes) { request.answer(outcome) }
    }
}

extension GroupCommit {
    /// Commits `requests` in one write transaction; returns each one's outcome (its own input's
    /// error, or the commit's record). Throws when the transaction fails.
    private func commit(_ requests: [Request], _ core: StoreCore) throws -> [Outcome] {
        var outcomes = [Outcome](repeating: Outcome(), count: requests.count)
        let (_, record) = try core.commit(sizeHint: requests.reduce(0) { $0 + $1.sizeHint }) { transaction in
            for index in requests.indices {
                // Reset on every run: the body runs again when the map had to grow.
                outcomes[index] = Outcome()
                do {
                    try requests[index].operation(transaction)
                } catch let error as PersistentDefaultsError where error.concernsOnlyItsRequest {
                    outcomes[index].error = error
                }
            }
        }
        for index in requests.indices where outcomes[index].error == nil { outcomes[index].record = record }
        return outcomes
    }

    /// Whether a thread leads, and how many requests wait for the next batch (for tests).
    var leadAndQueue: (isLeading: Bool, queued: Int) { withState { ($0.isLeading, $0.queue.count) } }
}

extension PersistentDefaultsError {
    /// Whether the error comes from one request's own input, so that it fails only that
    /// request of a group-committed batch (it is thrown before the request writes anything).
    var concernsOnlyItsRequest: Bool {
        switch self {
        case .invalidKeyName, .encodingFailed, .decodingFailed, .valueTooLarge, .ownedByMirror: true
        default: false
        }
    }
}
