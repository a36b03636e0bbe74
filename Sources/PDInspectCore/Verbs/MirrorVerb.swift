import Dispatch
import Foundation
import PersistentDefaults
import Synchronization

/// `pdinspect mirror DB --etcd URL --etcd-prefix P --local-prefix L`: runs an ``EtcdMirror`` in the
/// foreground until SIGINT or SIGTERM (or `--timeout`), printing each change of its state on
/// standard error.
struct MirrorVerb: VerbCommand {
    var database: String
    var endpoints: [String]
    var etcdPrefix: String
    var localPrefix: String
    var timeout: Double? = nil

    static let name = "mirror"
    static let synopsis = "DB --etcd URL[,URL] --etcd-prefix P --local-prefix L"
    static let summary = "make keys under L follow etcd keys under P, until SIGINT or SIGTERM"
    static let options = [
        OptionSpec("--etcd", value: "URL[,URL]", help: "etcd client URLs (http://HOST:PORT), comma-separated"),
        OptionSpec("--etcd-prefix", value: "P", help: "the etcd keys mirrored start with P"),
        OptionSpec("--local-prefix", value: "L", help: "local key L<name> follows etcd key P<name>"),
        .timeout,
    ]
    static let details = """
        Creates DB when missing. Copies the etcd prefix at one revision in one commit, then applies
        each etcd revision as one commit, resuming after the revision recorded in DB. Keys under L
        are then owned by the mirror: set, delete and import refuse them. Values in etcd are the
        typed JSON of one value, as export writes it:
          etcdctl put /fleet/myservice/maxConnections '{"type":"int","value":300}'
        Prints each change of state (live, reconnecting) on standard error. Runs until SIGINT or
        SIGTERM (a systemd service), or --timeout SECONDS.
        """

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        let database = try arguments.positionals(["DB"])[0]
        var required: [String] = []
        for option in ["--etcd", "--etcd-prefix", "--local-prefix"] {
            guard let value = arguments.value(option), !value.isEmpty else {
                throw arguments.error("mirror needs \(option)")
            }
            required.append(value)
        }
        let endpoints = required[0].split(separator: ",").map { String($0) }
        for endpoint in endpoints where !(endpoint.hasPrefix("http://")) {
            throw arguments.error("--etcd takes http://HOST:PORT URLs, not '\(endpoint)'")
        }
        return Self(
            database: database, endpoints: endpoints, etcdPrefix: required[1], localPrefix: required[2],
            timeout: try arguments.timeout())
    }

    func run(in runner: Runner) throws {
        // Creates the store when missing (the mirror's first copy fills it).
        let store = try PersistentDefaults(path: database)
        let stop = StopSignal()
        var options = EtcdMirror.Options()
        if let timeout {
            // --timeout bounds the whole run, the first copy included.
            options.startTimeout = min(options.startTimeout, ParsedArguments.timeoutDuration(seconds: timeout))
            options.requestTimeout = min(options.requestTimeout, options.startTimeout)
        }
        let mirror = try EtcdMirror(
            store: store, endpoints: endpoints, etcdPrefix: etcdPrefix, localPrefix: localPrefix, options: options)
        try Self.waitFor { try await mirror.start() }
        runner.console.printError(
            "pdinspect: mirroring etcd \(etcdPrefix) into \(localPrefix) of \(store.path), \(Self.describe(mirror.state))\n"
        )
        let deadline = timeout.map { Date(timeIntervalSinceNow: $0) }
        var shown = mirror.state
        while !stop.isRaised, deadline.map({ Date() < $0 }) ?? true {
            // Woken at once by a signal; otherwise looks at the state every second.
            _ = stop.wakeUp.wait(timeout: .now() + .seconds(1))
            let state = mirror.state
            if Self.describe(state) != Self.describe(shown) {
                runner.console.printError("pdinspect: \(Self.describe(state))\n")
                shown = state
            }
        }
        try Self.waitFor { try await mirror.stop() }
        runner.console.printError("pdinspect: stopped at revision \(mirror.appliedRevision)\n")
    }

    /// One line for a state; a live mirror's changing revision is not a change of state.
    private static func describe(_ state: EtcdMirror.State) -> String {
        switch state {
        case .idle: "idle"
        case .starting: "starting"
        case .live: "live"
        case .reconnecting(let since, let revision):
            "reconnecting since \(TextTable.timestamp(since)), local copy at revision \(revision)"
        case .stopped: "stopped"
        }
    }

    /// Runs `body` in a task and blocks this thread — pdinspect's main thread, never a Swift
    /// concurrency thread — until it finishes.
    private static func waitFor(_ body: @escaping @Sendable () async throws -> Void) throws {
        let done = DispatchSemaphore(value: 0)
        let outcome = Outcome()
        Task {
            do { try await body() } catch { outcome.set(error) }
            done.signal()
        }
        done.wait()
        if let error = outcome.error { throw error }
    }

    /// The error of a task, read after it signalled.
    private final class Outcome: Sendable {
        private let stored = Mutex<(any Error)?>(nil)
        func set(_ error: any Error) { stored.withLock { $0 = error } }
        var error: (any Error)? { stored.withLock { $0 } }
    }
}

extension Verb {
    /// `mirror`
    public static let mirror = Verb(MirrorVerb.self)
}

extension Command {
    /// Mirror the etcd prefix `etcdPrefix` into the local prefix `localPrefix` (see
    /// `EtcdMirror`) until SIGINT or SIGTERM, or for `timeout` seconds.
    public static func mirror(
        database: String, endpoints: [String], etcdPrefix: String, localPrefix: String, timeout: Double? = nil
    ) -> Command {
        Command(
            MirrorVerb(
                database: database, endpoints: endpoints, etcdPrefix: etcdPrefix, localPrefix: localPrefix,
                timeout: timeout))
    }
}
