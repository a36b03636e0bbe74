import Dispatch
import Foundation
import PersistentDefaults
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Follows a store's commit log by polling, for `watch` and `log --follow`.
///
/// A read transaction is cheap (well under a microsecond), so polling every 25 ms costs nothing
/// measurable. The observer library may replace ``follow(after:until:_:)`` later; nothing else
/// depends on how new commits are found.
struct CommitFollower {
    let store: PersistentDefaults
    var interval: Duration = .milliseconds(25)

    /// Passes each batch of records after `sequence` to `handle` until `handle` returns false,
    /// the deadline passes or `stop` is raised.
    func follow(
        after sequence: UInt64, until deadline: ContinuousClock.Instant?, stop: StopSignal,
        _ handle: ([CommitRecord]) throws -> Bool
    ) throws {
        var cursor = sequence
        let seconds = Double(interval.components.seconds) + Double(interval.components.attoseconds) / 1e18
        while !stop.isRaised {
            if let deadline, ContinuousClock.now >= deadline { return }
            let records = try store.commits(after: cursor, limit: 1_000)
            guard let last = records.last else {
                Thread.sleep(forTimeInterval: seconds)
                continue
            }
            cursor = last.sequence
            guard try handle(records) else { return }
        }
    }
}

/// Raised by SIGINT or SIGTERM, so that a follow loop ends cleanly with exit code 0.
///
/// `@unchecked Sendable`: the dispatch sources are set up once in `init` and only kept alive;
/// the flag is an `Atomic`.
final class StopSignal: @unchecked Sendable {
    private let raised = Atomic<Bool>(false)
    private var sources: [any DispatchSourceSignal] = []

    /// Starts listening for SIGINT and SIGTERM.
    init() {
        for number in [SIGINT, SIGTERM] {
            // The default action would kill the process; the dispatch source handles it instead.
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in self?.raised.store(true, ordering: .releasing) }
            source.resume()
            sources.append(source)
        }
    }

    var isRaised: Bool { raised.load(ordering: .acquiring) }
}
