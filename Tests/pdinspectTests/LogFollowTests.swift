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

/// A live follower handed two deliveries at once must check the gap between them too, not only
/// before the first.
@Suite("pdinspect follow: gaps between live deliveries")
struct LiveFollowGapTests {
    private static let counter = PersistentDefaults.Key<Int>("counter", default: 0)

    /// While the follower prints one live batch, this process's delivery of #3 is held up by a
    /// slow observer and #4…#6 are committed, the log keeping only the newest. The delivery
    /// then hands over #3 and, read from the log, #6: both reach the follower in one batch,
    /// which only compared its first record with the last one printed, and so printed #3 and #6
    /// and went on as if #4 and #5 never existed.
    @Test func recordsPrunedBetweenTwoLiveDeliveriesFailTheFollowInsteadOfBeingSkipped() throws {
        let fixture = try TemporaryStore(seeded: false)
        var options = PersistentDefaults.Options()
        options.logRetention = 1
        let store = try PersistentDefaults(path: fixture.path, options: options)
        store[Self.counter] = 1

        let firstBatch = DispatchSemaphore(value: 0)
        let holding = DispatchSemaphore(value: 0)
        let releaseHandle = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        let followerThread = Guarded<String?>(nil)
        let seen = Guarded<[UInt64]>([])
        let outcome = Guarded<(any Error)?>(nil)

        let path = fixture.path
        Thread {
            do {
                let console = Console(output: { _ in }, error: { _ in })
                try CommitFollower(opening: path, in: Runner(console: console)).follow(
                    after: 0, until: .now + .seconds(60), stop: StopSignal(signals: [])
                ) { records in
                    let sequences = records.map(\.sequence)
                    seen.withLock { $0 += sequences }
                    if sequences == [1] {
                        followerThread.withLock {
                            $0 = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")
                        }
                        firstBatch.signal()
                    }
                    if sequences.contains(2) {
                        holding.signal()
                        _ = releaseHandle.wait(timeout: .now() + 30)
                    }
                    return !sequences.contains(6)
                }
            } catch {
                outcome.withLock { $0 = error }
            }
            finished.signal()
        }.start()

        try #require(firstBatch.wait(timeout: .now() + 30) == .success)
        // #2 must come live, not from the follower's first reading of the log: wait until its
        // thread sleeps for deliveries.
        let task = try #require(followerThread.withLock { $0 })
        let deadline = Date().addingTimeInterval(10)
        while !Self.isSleeping("/proc/" + task), Date() < deadline { usleep(1_000) }
        #expect(Self.isSleeping("/proc/" + task))
        store[Self.counter] = 2
        try #require(holding.wait(timeout: .now() + 30) == .success)

        // Key observers are called before commit observers: the follower's observer gets #3 only
        // after the hold.
        try holdingDelivery(of: Self.counter, at: 3, committing: 3, in: store) {
            for value in 4...6 { store[Self.counter] = value }  // Each prunes all but the newest.
        }
        releaseHandle.signal()
        try #require(finished.wait(timeout: .now() + 60) == .success)

        let sequences = seen.withLock { $0 }
        let failure = outcome.withLock { $0 } as? CommandFailure
        #expect(failure?.message.contains("records #4…#5 were pruned") == true, "handed over \(sequences)")
        let gaps = zip(sequences, sequences.dropFirst()).filter { $1 != $0 + 1 }.map { "#\($0)→#\($1)" }
        #expect(gaps == [], "records skipped between those handed over")
    }

    /// `watch --prefix` while this process's delivery is held up by a slow observer and #3…#5
    /// are committed, the log keeping only the newest: the prefix observer hands over #5 alone,
    /// and the follower, which looked for gaps only without a prefix (a prefix observer skips the
    /// commits outside its prefix, so its records have gaps anyway), printed #5 as if #3 and #4,
    /// both under the prefix, never existed.
    @Test func aPrefixFollowerThatFellBehindThePrunedLogFailsInsteadOfSkippingRecords() throws {
        let fixture = try TemporaryStore(seeded: false)
        var options = PersistentDefaults.Options()
        options.logRetention = 1
        let store = try PersistentDefaults(path: fixture.path, options: options)
        let key = PersistentDefaults.Key<Int>("p.counter", default: 0)
        store[key] = 1

        let followed = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        let seen = Guarded<[UInt64]>([])
        let outcome = Guarded<(any Error)?>(nil)
        let path = fixture.path
        try holdingDelivery(of: key, at: 2, committing: 2, in: store) {
            Thread {
                do {
                    let console = Console(output: { _ in }, error: { _ in })
                    try CommitFollower(opening: path, in: Runner(console: console), prefix: "p.").follow(
                        after: 1, until: .now + .seconds(30), stop: StopSignal(signals: [])
                    ) { records in
                        let sequences = records.map(\.sequence)
                        seen.withLock { $0 += sequences }
                        // #2, read from the log after the follower's observer was registered.
                        if sequences == [2] { followed.signal() }
                        return !sequences.contains(5)
                    }
                } catch {
                    outcome.withLock { $0 = error }
                }
                finished.signal()
            }.start()
            try #require(followed.wait(timeout: .now() + 30) == .success)
            for value in 3...5 { store[key] = value }  // Each prunes all but the newest.
        }
        try #require(finished.wait(timeout: .now() + 30) == .success)

        let sequences = seen.withLock { $0 }
        let failure = outcome.withLock { $0 } as? CommandFailure
        #expect(failure?.message.contains("records #3…#4 were pruned") == true, "handed over \(sequences)")
        #expect(sequences == [2], "records skipped between those handed over")
    }

    /// Whether the thread whose `/proc` directory is `task` sleeps (state `S`).
    private static func isSleeping(_ task: String) -> Bool {
        guard let stat = try? String(contentsOfFile: task + "/stat", encoding: .utf8),
            let end = stat.lastIndex(of: ")")
        else { return false }
        return stat[stat.index(after: end)...].trimmingCharacters(in: .whitespaces).hasPrefix("S")
    }
}
