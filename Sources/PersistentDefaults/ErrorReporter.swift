/// Passes errors to the handler; decoding failures only once per key and reason.
final class ErrorReporter: Sendable {
    private let handler: @Sendable (PersistentDefaultsError) -> Void
    /// The UTF-8 bytes of each reported message: `String` equality would take the message about
    /// an NFD key name for the one about its NFC form.
    private let reported = Locked<Set<[UInt8]>>([])

    init(handler: @escaping @Sendable (PersistentDefaultsError) -> Void) { self.handler = handler }

    func report(_ error: any Error) {
        handler(error as? PersistentDefaultsError ?? .unknown(description: "\(error)"))
    }

    func reportOnce(_ error: any Error) {
        let text = "\(error)"
        let isNew = reported.withLock { seen in
            guard seen.count < 10_000 else { return false }
            return seen.insert(Array(text.utf8)).inserted
        }
        if isNew { report(error) }
    }
}
