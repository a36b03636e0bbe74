import Dispatch
import Synchronization

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
final class GroupCommit: Sendable {
    /// One queued write.
    final class Request: @unchecked Sendable {
        // @unchecked Sendable: `outcome` and `leads` are written before `done` is signalled and
        // read after it is waited for; the semaphore orders the accesses.
        let operation: @Sendable (WriteTransaction) throws -> Void
        let sizeHint: Int
        let done = DispatchSemaphore(value: 0)
        var outcome: (any Error)?
        var leads = false

        init(sizeHint: Int, operation: @escaping @Sendable (WriteTransaction) throws -> Void) {
            self.sizeHint = sizeHint
            self.operation = operation
        }
    }

    private struct State {
        var queue: [Request] = []
        /// Whether a thread leads, or is being handed the lead.
        var isLeading = false
        /// The leading thread; nil while the lead is being handed over.
        var leader: pthread_t?
    }

    private let state = Mutex(State())

    /// Runs `operation` in a write transaction, possibly together with other threads' requests.
    func perform(
        core: StoreCore, sizeHint: Int, _ operation: @escaping @Sendable (WriteTransaction) throws -> Void
    ) throws {
        let request = Request(sizeHint: sizeHint, operation: operation)
        let role = state.withLock { state -> Role in
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
            request.done.wait()
            if request.leads { lead(core) }
        case .lead:
            lead(core)
        }
        if let error = request.outcome { throw error }
    }

    private enum Role {
        case lead, follow, direct
    }

    /// Commits one batch, then hands the lead to the first request queued meanwhile.
    private func lead(_ core: StoreCore) {
        let batch = state.withLock { state in
            state.leader = pthread_self()
            defer { state.queue.removeAll() }
            return state.queue
        }
        do {
            try core.write(sizeHint: batch.reduce(0) { $0 + $1.sizeHint }) { transaction in
                for request in batch { try request.operation(transaction) }
            }
        } catch {
            for request in batch { request.outcome = error }
        }
        let next = state.withLock { state -> Request? in
            state.leader = nil
            guard let first = state.queue.first else {
                state.isLeading = false
                return nil
            }
            return first
        }
        // The leader's own request is in the batch too; signalling it wakes nobody.
        for request in batch { request.done.signal() }
        if let next {
            next.leads = true
            next.done.signal()
        }
    }
}
