import PersistentDefaults

/// Why a command stopped: a one-line message for standard error and the exit code.
struct CommandFailure: Error, Sendable, Equatable {
    var code: ExitCode
    var message: String

    init(_ code: ExitCode, _ message: String) {
        self.code = code
        self.message = message
    }

    /// Maps a library error: bad input is a usage error, everything else means the store
    /// cannot be opened, read or written.
    init(_ error: any Error) {
        switch error {
        case let failure as CommandFailure:
            self = failure
        case let usage as UsageError:
            self.init(.usage, usage.description)
        case PersistentDefaultsError.invalidKeyName, PersistentDefaultsError.encodingFailed,
            PersistentDefaultsError.valueTooLarge, PersistentDefaultsError.ownedByMirror:
            self.init(.usage, "\(error)")
        case EtcdMirrorError.invalidEndpoint, EtcdMirrorError.invalidPrefix:
            self.init(.usage, "\(error)")
        default:
            self.init(.unavailable, "\(error)")
        }
    }
}
