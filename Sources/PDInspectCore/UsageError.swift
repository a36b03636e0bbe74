/// A command line that `pdinspect` cannot run, with a one-line reason.
public struct UsageError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The reason, including a "did you mean …" hint when there is one.
    public let message: String
    /// The verb whose help would explain the mistake, when known.
    public let verb: Verb?

    /// Creates a usage error.
    public init(_ message: String, verb: Verb? = nil) {
        self.message = message
        self.verb = verb
    }

    /// The message and where to read more.
    public var description: String {
        message + " (see: pdinspect " + (verb.map { "\($0.rawValue) " } ?? "") + "--help)"
    }
}
