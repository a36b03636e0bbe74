import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

@testable import PDInspectCore

/// `log` and `watch` never skip records the log no longer holds in silence.
@Suite("pdinspect log and watch against a pruned log")
struct LogFollowTests {
    /// A store whose log keeps `retention` records, holding `commits` commits of one key.
    private static func store(at path: String, retention: Int, commits: Int) throws -> PersistentDefaults {
        var options = PersistentDefaults.Options()
        options.logRetention = retention
        let store = try PersistentDefaults(path: path, options: options)
        for _ in 0..<commits { store[counter] += 1 }
        return store
    }

    private static let counter = PersistentDefaults.Key<Int>("counter", default: 0)

    /// A follower busy with its first batch (as a paused pager keeps it) while writers commit
    /// past the retention: its next batch began after a gap, printed as if nothing were missing.
    @Test func aFollowerWhoseNextRecordsWerePrunedMeanwhileFailsInsteadOfSkippingThem() throws {
        let fixture = try TemporaryStore(seeded: false)
        let store = try Self.store(at: fixture.path, retention: 2_000, commits: 2_000)
        var seen: [UInt64] = []
        let failure = #expect(throws: CommandFailure.self) {
            let console = Console(output: { _ in }, error: { _ in })
            try CommitFollower(opening: fixture.path, in: Runner(console: console)).follow(
                after: 0, until: .now + .seconds(60), stop: StopSignal(signals: [])
            ) { records in
                if seen.isEmpty {
                    for _ in 0..<1_100 { store[Self.counter] += 1 }
                }
                seen += records.map(\.sequence)
                return seen.last != 3_100
            }
        }
        #expect(failure?.code == .failure)
        #expect(failure?.message.contains("were pruned") == true)
        let gaps = zip(seen, seen.dropFirst()).filter { $1 != $0 + 1 }.map { "#\($0)→#\($1)" }
        #expect(seen.first == 1)
        #expect(gaps == [], "records skipped between those handed over")
    }

    /// `--since N` below the oldest record kept printed the log from that record, exit 0.
    @Test func logAndWatchSinceAPrunedSequenceExitWithOneAndSayWhatIsMissing() throws {
        let fixture = try TemporaryStore(seeded: false)
        let store = try Self.store(at: fixture.path, retention: 10, commits: 40)
        let oldest = try #require(try store.statistics().logRange?.lowerBound)
        #expect(oldest > 6)
        let log = try pdinspect("log", fixture.path, "--since", "5")
        #expect(log.status == 1)
        #expect(log.stdout.isEmpty)
        #expect(log.stderr.contains("records #6…#\(oldest - 1) were pruned"))
        let watch = try pdinspect("watch", fixture.path, "--since", "5", "--timeout", "5")
        #expect(watch.status == 1)
        #expect(watch.stderr.contains("records #6…#\(oldest - 1) were pruned"))
        // Within the log, and without --since, nothing changes.
        #expect(try pdinspect("log", fixture.path, "--since", "\(oldest - 1)").status == 0)
        #expect(try pdinspect("log", fixture.path).status == 0)
    }
}
