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
/// sync covers them all. Each caller returns only after the transaction holding its write is
/// durable (and its observers have run); a failed transaction fails every request in it. A
/// thread that writes while it leads (an observer callback writing the store) writes directly.
///
/// The locks are Foundation's (`NSLock`, `NSCondition`, both `pthread` based) rather than
/// `Synchronization.Mutex`, so that ThreadSanitizer, which cannot see the prebuilt `Mutex`, can
/// check this hand-off.
final class GroupCommit: Sendable {
    /// One queued write and, once its batch is done, how it ended.
    final class Request: @unchecked Sendable {
        // @unchecked Sendable: `operation` and `sizeHint` are immutable; the rest is guarded by
        // `condition`.
        let operation: @Sendable (WriteTransaction) throws -> Void
        let sizeHint: Int
        private let condition = NSCondition()
        private var isAnswered = false
        private var outcome: (any Error)?
        private var leads = false

        init(sizeHint: Int, operation: @escaping @Sendable (WriteTransaction) throws -> Void) {
            self.sizeHint = sizeHint
            self.operation = operation
        }

        /// Tells the waiting caller how its batch ended, or that it leads the next batch.
        func answer(outcome: (any Error)? = nil, leads: Bool = false) {
            condition.lock()
            defer { condition.unlock() }
            if leads { self.leads = true } else { self.outcome = outcome }
            isAnswered = true
            condition.signal()
        }

        /// Waits for ``answer(outcome:leads:)``; returns whether the caller now leads the next
        /// batch (its outcome is then set by that batch; see ``result``).
        func waitForAnswer() -> Bool {
            condition.lock()
            defer { condition.unlock() }
            while !isAnswered { condition.wait() }
            isAnswered = false
            return leads
        }

        /// The outcome recorded by the batch that held this request.
        var result: (any Error)? {
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

    /// Runs `operation` in a write transaction, possibly together with other threads' requests.
    func perform(
        core: StoreCore, sizeHint: Int, _ operation: @escaping @Sendable (WriteTransaction) throws -> Void
    ) throws {
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
        if let error = request.result { throw error }
    }

    private enum Role {
        case lead, follow, direct
    }

    /// Commits one batch, then hands the lead to the first request queued meanwhile.
    private func lead(_ core: StoreCore) {
        let batch = withState { state in
            state.leader = pthread_self()
            defer { state.queue.removeAll() }
            return state.queue
        }
        var outcome: (any Error)?
        do {
            try core.write(sizeHint: batch.reduce(0) { $0 + $1.sizeHint }) { transaction in
                for request in batch { try request.operation(transaction) }
            }
        } catch {
            outcome = error
        }
        let next = withState { state -> Request? in
            state.leader = nil
            guard let first = state.queue.first else {
                state.isLeading = false
                return nil
            }
            return first
        }
        // The leader's own request is in the batch too; nobody waits for its answer.
        for request in batch { request.answer(outcome: outcome) }
        next?.answer(leads: true)
    }
}
