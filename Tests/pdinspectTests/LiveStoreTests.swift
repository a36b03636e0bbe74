import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// `pdinspect` on a store that another process writes at the same moment: the fixture's `hammer`
/// commits `counter` and `mirror` (both n) as the n-th logged commit of a fresh store.
@Suite("pdinspect on a live store")
struct LiveStoreTests {
    /// A `hammer` child writing the fixture's fresh store until the test ends, once it committed.
    private static func startWriter(_ fixture: TemporaryStore) throws -> ChildProcess {
        let writer = try ChildProcess(
            fixture: ["hammer", fixture.path, "1", "10000000"], environment: ["PD_DURABILITY": "bounded"])
        let store = try fixture.open()
        let counter = PersistentDefaults.Key<Int>("counter", default: 0)
        let started = Date.now
        while try store.value(for: counter) < 10, Date.now.timeIntervalSince(started) < 20 {
            _ = try store.read { _ in }  // Polls the other process's commits; no sleep.
        }
        #expect(try store.value(for: counter) >= 10, "the writer did not start")
        return writer
    }

    @Test func describeShowsTheValueAndTheLastChangeOfOneCommit() throws {
        let fixture = try TemporaryStore(seeded: false)
        let writer = try Self.startWriter(fixture)
        defer { _ = writer.kill() }
        var mismatches: [String] = []
        for _ in 0..<150 {
            let outcome = try pdinspect("describe", fixture.path, "counter", "--json")
            #expect(outcome.status == 0, "\(outcome)")
            let report = try #require(try outcome.json() as? [String: Any])
            let value = (report["value"] as? [String: Any])?["value"] as? Int
            let last = (report["lastChange"] as? [String: Any])?["sequence"] as? Int
            // The n-th commit sets counter to n: a value and a last change of one commit agree.
            if value != last { mismatches.append("value \(value ?? -1), last change #\(last ?? -1)") }
        }
        #expect(mismatches.count == 0, "of 150: \(mismatches.prefix(3))")
    }

    /// A service keeps more history than the default retention; an operator's `set` must not
    /// prune it to `pdinspect`'s own defaults.
    @Test func setKeepsTheLogThatTheStoreRetains() throws {
        let fixture = try TemporaryStore(seeded: false)
        var options = PersistentDefaults.Options()
        options.logRetentionBytes = 64 << 20
        let store = try PersistentDefaults(path: fixture.path, options: options)
        let blob = PersistentDefaults.Key<Data>("blob", default: Data())
        for byte in 0..<6 { try store.set(Data(repeating: UInt8(byte), count: 1 << 20), for: blob) }
        let before = try store.commits(after: 0).map(\.sequence)
        let outcome = try pdinspect("set", fixture.path, "theme", "dark", "--type", "string")
        #expect(outcome.status == 0, "\(outcome)")
        let after = try store.commits(after: 0).map(\.sequence)
        #expect(after == before + [before.last! + 1], "log before \(before), after \(after)")
    }
}
