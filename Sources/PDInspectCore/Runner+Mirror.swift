import Dispatch
import Foundation
import PersistentDefaults
import Synchronization

extension Runner {
    /// `pdinspect mirror`: runs an ``EtcdMirror`` in the foreground until SIGINT or SIGTERM (or
    /// `timeout`), printing each change of its state on standard error.
    func mirror(
        _ store: PersistentDefaults, endpoints: [String], etcdPrefix: String, localPrefix: String, timeout: Double?
    ) throws {
        let stop = StopSignal()
        var options = EtcdMirror.Options()
        if let timeout {
            // --timeout bounds the whole run, the first copy included.
            options.startTimeout = min(options.startTimeout, .milliseconds(Int(timeout * 1000)))
            options.requestTimeout = min(options.requestTimeout, options.startTimeout)
        }
        let mirror = try EtcdMirror(
            store: store, endpoints: endpoints, etcdPrefix: etcdPrefix, localPrefix: localPrefix, options: options)
        try Self.waitFor { try await mirror.start() }
        console.printError(
            "pdinspect: mirroring etcd \(etcdPrefix) into \(localPrefix) of \(store.path), \(Self.describe(mirror.state))\n"
        )
        let deadline = timeout.map { Date(timeIntervalSinceNow: $0) }
        var shown = mirror.state
        while !stop.isRaised, deadline.map({ Date() < $0 }) ?? true {
            // Woken at once by a signal; otherwise looks at the state every second.
            _ = stop.wakeUp.wait(timeout: .now() + .seconds(1))
            let state = mirror.state
            if Self.describe(state) != Self.describe(shown) {
                console.printError("pdinspect: \(Self.describe(state))\n")
                shown = state
            }
        }
        try Self.waitFor { try await mirror.stop() }
        console.printError("pdinspect: stopped at revision \(mirror.appliedRevision)\n")
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
