import Foundation
import Synchronization

extension PersistentDefaults {
    /// The environment variable that sets where ``standard`` lives: `PERSISTENT_DEFAULTS_PATH`.
    public static let standardPathEnvironmentVariable = "PERSISTENT_DEFAULTS_PATH"

    private struct StandardState: Sendable {
        var path: String?
        var options = Options()
        var store: PersistentDefaults?
    }

    private static let standardState = Locked(StandardState())

    /// The process-wide store that property wrappers use when no store is given.
    ///
    /// It lives in the directory ``standardPath``: `$PERSISTENT_DEFAULTS_PATH` when set, else
    /// `$XDG_CONFIG_HOME/<executable name>/defaults` (`~/.config/<executable name>/defaults` when
    /// `XDG_CONFIG_HOME` is unset). Call ``configureStandard(path:options:)`` before first use to
    /// choose another place or other options.
    ///
    /// Opened on first use. If it cannot be opened, the error is passed to the configured
    /// ``Options/errorHandler`` and a temporary store stands in (``isTemporary`` is true), so
    /// that the app keeps running: a new private directory
    /// `PersistentDefaults-standard-<pid>-XXXXXX` in the temporary directory, else in
    /// `/dev/shm` (memory), removed with everything written there when the process exits
    /// normally, like a ``temporary(options:)`` store; after a crash or a kill the system's
    /// temporary-file cleanup removes it (for `/dev/shm`, a reboot). Only when no temporary
    /// directory can hold a store either does it stop the process, naming every failure: a
    /// non-throwing property has nothing left to return. Code that must never stop uses
    /// ``openStandard()``, which throws instead.
    public static var standard: PersistentDefaults {
        var failure: (report: @Sendable (PersistentDefaultsError) -> Void, error: PersistentDefaultsError)?
        let store = standardState.withLock { state in
            if let store = state.store { return store }
            let store: PersistentDefaults
            do {
                store = try open(&state)
            } catch {
                failure = (
                    state.options.errorHandler,
                    error as? PersistentDefaultsError
                        ?? .notAStore(path: state.path ?? standardPath, reason: "\(error)")
                )
                store = temporaryStandIn(options: state.options)
            }
            state.store = store
            return store
        }
        // The handler is the app's code, which may use `standard` itself (a logger reading its
        // level from settings): it runs after the lock, once the stand-in is in place.
        if let failure { failure.report(failure.error) }
        return store
    }

    /// The store ``standard`` gives, opened now if it is not open yet; throws what opening it
    /// throws instead of standing in a temporary store.
    ///
    /// ```swift
    /// let settings = try PersistentDefaults.openStandard()
    /// ```
    public static func openStandard() throws -> PersistentDefaults {
        try standardState.withLock { state in
            if let store = state.store { return store }
            let store = try open(&state)
            state.store = store
            return store
        }
    }

    private static func open(_ state: inout StandardState) throws -> PersistentDefaults {
        try PersistentDefaults(path: state.path ?? standardPath, options: state.options)
    }

    /// Where ``standard`` lives unless configured: `$PERSISTENT_DEFAULTS_PATH`, else
    /// `$XDG_CONFIG_HOME/<executable name>/defaults`, else `~/.config/<executable name>/defaults`.
    public static var standardPath: String {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment[standardPathEnvironmentVariable], !path.isEmpty { return path }
        var config = environment["XDG_CONFIG_HOME"] ?? ""
        if !config.hasPrefix("/") {
            // The XDG specification: a relative XDG_CONFIG_HOME is invalid and ignored.
            config = (environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()) + "/.config"
        }
        let executable = (CommandLine.arguments.first.map { ($0 as NSString).lastPathComponent } ?? "")
        let name = executable.isEmpty ? "PersistentDefaults" : executable
        return config + "/" + name + "/defaults"
    }

    /// Chooses where ``standard`` lives and how it is opened. Call it before the first use of
    /// ``standard``; afterwards it throws ``PersistentDefaultsError/optionsConflict(path:reason:)``.
    public static func configureStandard(path: String? = nil, options: Options = Options()) throws {
        try standardState.withLock { state in
            if let store = state.store {
                throw PersistentDefaultsError.optionsConflict(
                    path: store.path, reason: "PersistentDefaults.standard is already in use")
            }
            state.path = path
            state.options = options
        }
    }

    /// A temporary store in a new directory under the temporary directory, else under
    /// `/dev/shm` (memory): its directory goes when the process exits normally, as nothing
    /// written there is ever read again (each process makes a new one).
    private static func temporaryStandIn(options: Options) -> PersistentDefaults {
        var failures: [String] = []
        for base in [FileManager.default.temporaryDirectory.path, "/dev/shm"] {
            do {
                return try temporary(in: base, prefix: "PersistentDefaults-standard-\(getpid())-", options: options)
            } catch {
                failures.append("\(error)")
            }
        }
        // Neither the configured directory nor any temporary one can hold a store: the machine
        // has no writable storage, and a non-throwing `standard` has nothing left to return.
        fatalError("PersistentDefaults.standard: no directory can hold a store: \(failures.joined(separator: "; "))")
    }
}
