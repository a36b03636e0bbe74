/// How `pdinspect` exits; documented in `pdinspect --help`.
public enum ExitCode: Int32, Sendable, CaseIterable {
    /// The command did what was asked.
    case success = 0
    /// The key is absent, `check` found problems, or log records asked for were pruned.
    case failure = 1
    /// The command line or the input (a value, a key name, an import file) is invalid.
    case usage = 2
    /// The database cannot be opened, read or written.
    case unavailable = 3

    /// What the code means, as the help prints it.
    public var meaning: String {
        switch self {
        case .success: "ok"
        case .failure: "key absent, check found problems, or log records asked for were pruned"
        case .usage:
            "usage error: unknown verb or option; a bad, too large or wrongly typed value, key name or import file"
        case .unavailable: "the database cannot be opened, read or written"
        }
    }
}
