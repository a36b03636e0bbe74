import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Passes errors to the handler; decoding failures only once per key and reason.
///
/// The handler is the user's code and may use the store, so it is called on the reporting
/// thread but never inside a write transaction of the store: an error reported there (a value
/// that does not decode read through `tx[key]`, a failed `store[key] = …` inside `write { }`)
/// waits until the transaction has ended on that thread, committed or not, and is passed then
/// (``deliverDeferred()``). Called inside it, the handler's own `store[key] = …` threw
/// `nestedWrite`, which was reported to the handler inside itself, which wrote again, until the
/// stack overflowed.
final class ErrorReporter: Sendable {
    private let handler: @Sendable (PersistentDefaultsError) -> Void
    /// The UTF-8 bytes of each reported message: `String` equality would take the message about
    /// an NFD key name for the one about its NFC form.
    private let reported = Locked<Set<[UInt8]>>([])
    /// Tells whether the reporting thread is inside a write transaction of the store; nil for a
    /// reporter of no store (tests).
    private let gate: TransactionGate?
    /// The errors that wait for a write transaction to end, by thread.
    private let waiting = Locked<[UInt: [PersistentDefaultsError]]>([:])
    /// How many entries `waiting` has: ``deliverDeferred()``, called after every write, reads
    /// only this when it is 0. A thread sees its own entry's count without a lock: it made it.
    private let entries = Atomic<Int>(0)

    init(handler: @escaping @Sendable (PersistentDefaultsError) -> Void, gate: TransactionGate? = nil) {
        self.handler = handler
        self.gate = gate
    }

    func report(_ error: any Error) {
        let error = error as? PersistentDefaultsError ?? .unknown(description: "\(error)")
        guard gate?.isWritingOnCurrentThread == true else { return handler(error) }
        waiting.withLock { waiting in
            if waiting[Self.currentThread] == nil { entries.add(1, ordering: .relaxed) }
            waiting[Self.currentThread, default: []].append(error)
        }
    }

    func reportOnce(_ error: any Error) {
        let text = "\(error)"
        let isNew = reported.withLock { seen in
            guard seen.count < 10_000 else { return false }
            return seen.insert(Array(text.utf8)).inserted
        }
        if isNew { report(error) }
    }

    /// Passes the errors reported inside the calling thread's write transaction, which has
    /// ended; call after every write transaction, with no lock of the store held. Does nothing
    /// inside a write transaction (a nested write that failed).
    func deliverDeferred() {
        guard entries.load(ordering: .relaxed) > 0, gate?.isWritingOnCurrentThread != true else { return }
        let errors = waiting.withLock { waiting in
            let errors = waiting.removeValue(forKey: Self.currentThread)
            if errors != nil { entries.subtract(1, ordering: .relaxed) }
            return errors ?? []
        }
        for error in errors { handler(error) }
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
