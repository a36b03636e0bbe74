import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Passes errors to the handler; decoding failures only once per key and reason.
///
/// The handler is the user's code and may use the store, so it is called on the reporting
/// thread but never there — in this store or in any other the thread is using:
/// - inside a write transaction of the store: an error reported there (a value that does not
///   decode read through `tx[key]`, a failed `store[key] = …` inside `write { }`) waits until the
///   transaction has ended on that thread, committed or not, and is passed then
///   (``deliverDeferred()``). Called inside it, the handler's own `store[key] = …` threw
///   `nestedWrite`, which was reported to the handler inside itself, which wrote again, until
///   the stack overflowed;
/// - inside a read scope of the store (`read { }`): an error reported there (a value that does
///   not decode read through `snapshot[key]`) waits until the outermost scope on that thread has
///   ended. Called inside it, the handler held the scope's snapshot: its write could not grow
///   the map (that waits for every read of this process to end) and failed with `mapFull`, and
///   after another process grew the map its reads saw the scope's old commit;
/// - inside itself: an error that the handler's own use of the store causes is passed to it
///   after it returns, once; one caused while it handles such an error goes to standard error
///   (``PersistentDefaults/Options/printToStandardError``). A handler whose write kept failing
///   (a full disk, a value over the size limit, a read-only store) recursed without end.
///
/// The same holds across stores: an error of store A met inside store B's write transaction or
/// read scope on the same thread (`b.write { _ = a[key] }`) waits until the thread is in no
/// store's scope, and is passed when the last one ends (whichever store's it is). Called inside
/// B's write, A's handler held B's writer lock while it ran, and its own write to B threw
/// `nestedWrite`.
///
/// A decoding failure counts as reported once it has reached the handler or waits for it; one
/// that went to standard error does not, so the next time it is met it reaches the handler
/// (counted, it never did: the app's own later reads of the key were silent).
final class ErrorReporter: Sendable {
    private let handler: @Sendable (PersistentDefaultsError) -> Void
    /// The UTF-8 bytes of each message ``reportOnce(_:)`` passed to the handler or queued for it:
    /// `String` equality would take the message about an NFD key name for the one about its NFC
    /// form. Taken inside `threads`' lock, never the other way round.
    private let reported = Locked<Set<[UInt8]>>([])
    /// The threads that run the handler or have errors waiting for it, by thread.
    private let threads = Locked<[UInt: ThreadReports]>([:])
    /// How many entries `threads` has: ``deliverDeferred()``, called after every write and read
    /// scope, and ``pendingMark()``, called before every write, read only this when it is 0. A
    /// thread sees its own entry's count without a lock: it made it.
    private let entries = Atomic<Int>(0)

    /// An error for the handler and how far it is from the user's own call: 1 for an error of
    /// that call, 2 for one the handler caused while it handled a 1.
    private struct Pending {
        var error: PersistentDefaultsError
        var generation: Int
        /// The message's UTF-8 bytes when ``reportOnce(_:)`` recorded it as reported: forgotten
        /// again when the error is discarded (``discardReports(since:)``).
        var onceMessage: [UInt8]?
    }

    /// One thread's errors for the handler.
    private struct ThreadReports {
        /// The generation of the error the handler handles on this thread now; 0 when it does
        /// not run (the errors wait for a read scope or write transaction to end).
        var handling = 0
        var pending: [Pending] = []
    }

    /// The reporters with errors waiting on each thread for its scopes to end, in the order
    /// their first error was met: whichever store's scope ends last passes them all.
    private static let waiting = Locked<[UInt: [ErrorReporter]]>([:])
    /// How many threads `waiting` has: ``deliverDeferred()`` reads only this when it is 0.
    private static let waitingThreads = Atomic<Int>(0)

    /// What `report` does with an error.
    private enum Disposition {
        case call, wait, print
        /// Wait, and the thread had no errors of this reporter waiting: register it in `waiting`.
        case waitFirst
        /// Reported once already (``reportOnce(_:)``): nothing to do.
        case drop
    }

    init(handler: @escaping @Sendable (PersistentDefaultsError) -> Void) {
        self.handler = handler
    }

    func report(_ error: any Error) { report(error, once: nil) }

    /// `report`; `message` is the error's text for ``reportOnce(_:)``, which passes only an error
    /// whose message was not reported yet, and records it as reported unless it goes to
    /// standard error.
    private func report(_ error: any Error, once message: [UInt8]?) {
        let error = error as? PersistentDefaultsError ?? .unknown(description: "\(error)")
        let thread = Self.currentThread
        let isInScope = TransactionGate.isAnyHeldByCurrentThread
        let disposition = threads.withLock { threads -> Disposition in
            if var reports = threads[thread] {
                // The handler runs on this thread (the error is its doing), or errors wait for
                // this thread's read scope or write transaction to end.
                let generation = reports.handling + 1
                // Standard error: not recorded as reported (see the type's comment).
                guard generation <= 2 else {
                    return message.map { isNew($0, recording: false) } == false ? .drop : .print
                }
                if let message, !isNew(message, recording: true) { return .drop }
                reports.pending.append(Pending(error: error, generation: generation, onceMessage: message))
                threads[thread] = reports
                return .wait
            }
            if let message, !isNew(message, recording: true) { return .drop }
            entries.add(1, ordering: .relaxed)
            if isInScope {
                threads[thread] = ThreadReports(pending: [Pending(error: error, generation: 1, onceMessage: message)])
                return .waitFirst
            }
            threads[thread] = ThreadReports(handling: 1)
            return .call
        }
        switch disposition {
        case .call: callHandler(with: error, on: thread)
        case .wait: break
        case .waitFirst:
            Self.waiting.withLock { waiting in
                if waiting[thread] == nil { Self.waitingThreads.add(1, ordering: .relaxed) }
                waiting[thread, default: []].append(self)
            }
        case .print: PersistentDefaults.Options.printToStandardError(error)
        case .drop: break
        }
    }

    /// Whether `message` was not reported yet, recording it as reported when `recording`; false
    /// also once 10,000 messages are (the set stays bounded: past that, decoding failures are no
    /// longer reported).
    private func isNew(_ message: [UInt8], recording: Bool) -> Bool {
        reported.withLock { seen in
            guard seen.count < 10_000, !seen.contains(message) else { return false }
            if recording { seen.insert(message) }
            return true
        }
    }

    func reportOnce(_ error: any Error) { report(error, once: Array("\(error)".utf8)) }

    /// How many errors wait for the handler on the calling thread: the mark to pass to
    /// ``discardReports(since:)``. One relaxed load when no thread has errors waiting.
    @inline(__always)
    func pendingMark() -> Int {
        guard entries.load(ordering: .relaxed) > 0 else { return 0 }
        let thread = Self.currentThread
        return threads.withLock { $0[thread]?.pending.count ?? 0 }
    }

    /// Drops the errors reported on the calling thread since `mark` (``pendingMark()``), which
    /// wait for a write transaction to end: the run of a write body that reported them was
    /// aborted, and the body runs again (the map was full and has grown), so the handler hears
    /// the errors of the run that counts, once. A dropped ``reportOnce(_:)`` message is
    /// forgotten, so that the next run reports it again.
    func discardReports(since mark: Int) {
        guard entries.load(ordering: .relaxed) > 0 else { return }
        let thread = Self.currentThread
        let forgotten = threads.withLock { threads -> [[UInt8]] in
            guard var reports = threads[thread], reports.pending.count > mark else { return [] }
            let messages = reports.pending[mark...].compactMap(\.onceMessage)
            reports.pending.removeSubrange(mark...)
            if reports.handling == 0, reports.pending.isEmpty {
                threads[thread] = nil
                entries.subtract(1, ordering: .relaxed)
            } else {
                threads[thread] = reports
            }
            return messages
        }
        guard !forgotten.isEmpty else { return }
        reported.withLock { seen in
            for message in forgotten { seen.remove(message) }
        }
    }

    /// Passes the errors reported inside the calling thread's read scopes and write
    /// transactions, of this store and of every other, once the thread is in none; call after
    /// every read scope and write transaction, with no lock of the store held. Does nothing
    /// inside a read scope or write transaction of any store (a nested one ended, or a write
    /// inside `read { }`: the outermost one passes them) or inside the handler (which passes
    /// them when it returns). One relaxed load when no thread has errors waiting.
    func deliverDeferred() {
        guard Self.waitingThreads.load(ordering: .relaxed) > 0, !TransactionGate.isAnyHeldByCurrentThread else {
            return
        }
        let thread = Self.currentThread
        let reporters = Self.waiting.withLock { waiting -> [ErrorReporter] in
            guard let reporters = waiting.removeValue(forKey: thread) else { return [] }
            Self.waitingThreads.subtract(1, ordering: .relaxed)
            return reporters
        }
        for reporter in reporters { reporter.deliverWaiting(on: thread) }
    }

    /// Passes this reporter's errors that wait on `thread` (the calling one) to the handler.
    private func deliverWaiting(on thread: UInt) {
        let first = threads.withLock { threads -> PersistentDefaultsError? in
            guard var reports = threads[thread], reports.handling == 0, !reports.pending.isEmpty else { return nil }
            let next = reports.pending.removeFirst()
            reports.handling = next.generation
            threads[thread] = reports
            return next.error
        }
        if let first { callHandler(with: first, on: thread) }
    }

    /// Calls the handler with `error`, then with each error that waits for it on this thread,
    /// with no lock held; the thread's entry is gone when this returns.
    private func callHandler(with error: PersistentDefaultsError, on thread: UInt) {
        var next: PersistentDefaultsError? = error
        while let error = next {
            handler(error)
            next = threads.withLock { threads in
                guard var reports = threads[thread], !reports.pending.isEmpty else {
                    threads[thread] = nil
                    entries.subtract(1, ordering: .relaxed)
                    return nil
                }
                let pending = reports.pending.removeFirst()
                reports.handling = pending.generation
                threads[thread] = reports
                return pending.error
            }
        }
    }

    /// The calling thread's identity.
    private static var currentThread: UInt {
        #if canImport(Glibc)
            UInt(pthread_self())
        #else
            UInt(bitPattern: pthread_self())
        #endif
    }
}
