import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

extension PersistentDefaults.Keys {
    fileprivate static let mirroredMax = Key<Int>("fleet.maxConnections", default: 100)
    fileprivate static let banner = Key<String>("fleet.banner", default: "")
    fileprivate static let counter = Key<Int>("fleet.counter", default: 0)
    fileprivate static let unrelated = Key<Int>("local.unrelated", default: 0)
}

/// Fast timings for tests: short pauses, a 300 ms consistency check.
private func testOptions() -> EtcdMirror.Options {
    var options = EtcdMirror.Options()
    options.requestTimeout = .seconds(30)
    options.connectTimeout = .milliseconds(500)
    options.maxBackoff = .milliseconds(200)
    options.consistencyCheckInterval = .seconds(3600)
    options.startTimeout = .seconds(60)
    return options
}

/// A mirror of etcd's `/fleet/svc/` into the store's `fleet.` keys.
private func fleetMirror(
    _ store: PersistentDefaults, _ etcd: EtcdCluster, options: EtcdMirror.Options = testOptions()
) throws -> EtcdMirror {
    try EtcdMirror(
        store: store, endpoints: etcd.endpoints, etcdPrefix: "/fleet/svc/", localPrefix: "fleet.", options: options)
}

/// Starts and stops a mirror of the test prefix, as a service that ran before: the store then
/// records the mirror and the revision it reached, and the next mirror's start is a restart.
private func runMirrorOnce(_ store: PersistentDefaults, _ etcd: EtcdCluster) async throws {
    let mirror = try fleetMirror(store, etcd)
    try await mirror.start()
    try await mirror.stop()
}

/// Runs `body` with an etcd member that sends progress notifications at etcd's default interval
/// (10 min: a revision of another prefix reaches no watch of this one in a test's time), a store
/// and its started mirror whose requests time out after 5 s, with `.counter` set to 1.
private func withCounterMirrorOfQuietEtcd(
    _ body: (EtcdCluster, PersistentDefaults, EtcdMirror) async throws -> Void
) async throws {
    let etcd = try EtcdCluster(progressNotifyInterval: "10m")
    try await withTemporaryDirectoryAsync { path in
        let store = try PersistentDefaults(path: path)
        var options = testOptions()
        options.requestTimeout = .seconds(5)
        let mirror = try fleetMirror(store, etcd, options: options)
        try await mirror.start()
        try await mirror.set(1, for: .counter)
        try await body(etcd, store, mirror)
        try await mirror.stop()
    }
}

/// Removes the keys whose etcd value does not parse from the `fleet.` mirror's record in `meta`,
/// as a library from before it kept them wrote the record.
private func forgetUnparsableKeys(_ store: PersistentDefaults) throws {
    let core = store.core
    let name = StoreCore.mirrorKeyPrefix + Array("fleet.".utf8)
    try core.write { writer in
        let transaction = try writer.live()
        let raw = try name.withUnsafeBytes { key in
            try transaction.withValue(core.databases.meta, key) { $0.map { Data($0) } }
        }
        guard let raw, var record = try JSONSerialization.jsonObject(with: raw) as? [String: Any] else {
            throw EtcdTestError("the mirror has no record")
        }
        record["unparsable"] = nil
        let data = Array(try JSONSerialization.data(withJSONObject: record, options: [.sortedKeys]))
        try name.withUnsafeBytes { key in try data.withUnsafeBytes { try transaction.put(core.databases.meta, key, $0) }
        }
    }
}

@Suite(.serialized, .timeLimit(.minutes(3)))
struct MirrorTests {
    @Test func theInitialCopyIsOneCommitAtOneRevisionAndRemovesKeysEtcdDoesNotHave() async throws {
        let etcd = try EtcdCluster()
        _ = try etcd.put("/fleet/svc/maxConnections", typedInt(300))
        _ = try etcd.put("/fleet/svc/banner", #"{"type":"string","value":"hello"}"#)
        _ = try etcd.put("/other/x", typedInt(1))
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            store[.mirroredMax] = 7
            store[.counter] = 9  // Not in etcd: removed by the copy.
            store[.unrelated] = 5
            let before = try store.lastSequence()
            let mirror = try fleetMirror(store, etcd)
            try await mirror.start()
            let (_, revision) = try etcd.range("/fleet/svc/")
            #expect(store[.mirroredMax] == 300)
            #expect(store[.banner] == "hello")
            #expect(try !store.contains(.counter))
            #expect(store[.unrelated] == 5)
            let records = try store.commits(after: before)
            #expect(records.count == 1)
            #expect(
                Set(records.first?.changes.map(\.key) ?? []) == [
                    "fleet.maxConnections", "fleet.banner", "fleet.counter",
                ])
            #expect(try store.mirroredPrefixes().first?.revision == revision)
            #expect(mirror.state == .live(revision: revision))
            try await mirror.stop()
            #expect(mirror.state == .stopped)
        }
    }

    /// `stop()` while `start()` makes its initial copy returns only once the copy has ended: it
    /// used to return at once, and the copy then committed to the store after it.
    @Test func aStopDuringTheInitialCopyWaitsForIt() async throws {
        let etcd = try EtcdCluster()
        _ = try etcd.put("/fleet/svc/maxConnections", typedInt(300))
        // Failed in most of the 20 rounds before the fix.
        for round in 0..<20 {
            try await withTemporaryDirectoryAsync { path in
                let store = try PersistentDefaults(path: path)
                let mirror = try fleetMirror(store, etcd)
                let starting = Task { try await mirror.start() }
                let deadline = ContinuousClock.now + .seconds(30)
                while mirror.state == .idle, ContinuousClock.now < deadline { await Task.yield() }
                try await mirror.stop()
                let atStop = try store.lastSequence()
                let started = (try? await starting.value) != nil
                #expect(try store.lastSequence() == atStop, "round \(round): a commit after stop() returned")
                #expect(mirror.state == .stopped)
                if started { #expect(store[.mirroredMax] == 300) }
            }
        }
    }

    @Test func anEtcdTransactionArrivesAsOneCommitAndObserversSeeIt() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            let mirror = try fleetMirror(store, etcd)
            try await mirror.start()
            let seen = Guarded<[Int]>([])
            let batches = Guarded<[[String]]>([])
            let token = store.observe(.mirroredMax) { change in seen.withLock { $0.append(change.newValue) } }
            let group = store.observe(prefix: "fleet.") { record in
                batches.withLock { $0.append(record.changes.map(\.key).sorted()) }
            }
            let revision = try etcd.txn([
                ("/fleet/svc/maxConnections", typedInt(300)), ("/fleet/svc/banner", #"{"type":"string","value":"hi"}"#),
            ])
            try await waitUntil("the transaction is applied") { mirror.appliedRevision >= revision }
            try await waitUntil("the observers were called") {
                seen.withLock { $0 } == [300] && batches.withLock { $0.count } == 1
            }
            #expect(batches.withLock { $0 } == [["fleet.banner", "fleet.maxConnections"]])
            #expect(store[.banner] == "hi")
            token.cancel()
            group.cancel()
            try await mirror.stop()
        }
    }

    @Test func aRestartResumesAfterTheRecordedRevisionApplyingEachRevisionOnce() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            try await runMirrorOnce(store, etcd)
            let before = try store.lastSequence()
            var revisions: [Int64] = []
            for value in 1...3 { revisions.append(try etcd.put("/fleet/svc/counter", typedInt(value))) }
            _ = try etcd.put("/other/noise", typedInt(0))
            revisions.append(try etcd.delete("/fleet/svc/counter"))
            let second = try fleetMirror(store, etcd)
            try await second.start()
            try await waitUntil("every revision is applied") { second.appliedRevision >= revisions.last! }
            let records = try store.commits(after: before)
            let values = records.map { record in
                record.changes.first.flatMap { try? $0.storedValue() }
            }
            #expect(records.count == 4)
            #expect(values == [.int(1), .int(2), .int(3), nil])
            #expect(try store.mirroredPrefixes().first?.revision == revisions.last)
            try await second.stop()
        }
    }

    /// A restart behind ten revisions of 1.4 MB values (etcd's request limit is 1.5 MiB): etcd
    /// sends them as one 19 MB watch response. The watch looked for the end of that line from the
    /// start of the bytes received on every chunk (quadratic): `start()` gave up after its 30 s,
    /// and every later start began the same line again.
    @Test func aRestartCatchesUpOnRevisionsOfLargeValuesWithinTheStartTimeout() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            try await runMirrorOnce(store, etcd)
            let large = String(repeating: "x", count: 1_400_000)
            var last: Int64 = 0
            for index in 0..<10 {
                last = try etcd.put("/fleet/svc/large\(index)", #"{"type":"string","value":"\#(large)\#(index)"}"#)
            }
            var options = testOptions()
            options.startTimeout = .seconds(30)  // The default.
            let second = try fleetMirror(store, etcd, options: options)
            try await second.start()
            #expect(second.appliedRevision == last)
            #expect(store[PersistentDefaults.Key<String>("fleet.large9", default: "")] == large + "9")
            try await second.stop()
        }
    }

    @Test func twoMirrorsOfOneStoreApplyEachRevisionOnce() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            let mirrors = try (0..<2).map { _ in
                try fleetMirror(store, etcd)
            }
            for mirror in mirrors { try await mirror.start() }
            let before = try store.lastSequence()
            var last: Int64 = 0
            for value in 1...20 { last = try etcd.put("/fleet/svc/counter", typedInt(value)) }
            try await waitUntil("both mirrors saw every revision") { mirrors.allSatisfy { $0.appliedRevision >= last } }
            let records = try store.commits(after: before)
            #expect(records.count == 20)
            #expect(records.compactMap { try? $0.changes.first?.storedValue() } == (1...20).map { .int(Int64($0)) })
            for mirror in mirrors { try await mirror.stop() }
        }
    }

    /// A mirror of the store in another process (`pdinspect mirror`), started first and live.
    private func mirrorProcess(_ path: String, _ etcd: EtcdCluster) async throws -> ChildProcess {
        let child = try ChildProcess(
            Products.pdinspect,
            [
                "mirror", path, "--etcd", etcd.endpoints.joined(separator: ","), "--etcd-prefix", "/fleet/svc/",
                "--local-prefix", "fleet.",
            ])
        let store = try PersistentDefaults(path: path)
        let revision = try etcd.put("/fleet/svc/ready", typedInt(1))
        try await waitUntil("the other process's mirror applied a revision", timeout: .seconds(20)) {
            (try store.mirroredPrefixes().first?.revision ?? 0) >= revision
        }
        return child
    }

    @Test func mirrorsOfOneStoreInTwoProcessesApplyEachRevisionOnce() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryDirectoryAsync { path in
            let other = try await mirrorProcess(path, etcd)
            defer { other.kill() }
            let store = try PersistentDefaults(path: path)
            let mirror = try fleetMirror(store, etcd)
            try await mirror.start()
            let before = try store.lastSequence()
            var last: Int64 = 0
            for value in 1...40 { last = try etcd.put("/fleet/svc/counter", typedInt(value)) }
            try await waitUntil("both processes' mirrors saw every revision") {
                try mirror.appliedRevision >= last && (store.mirroredPrefixes().first?.revision ?? 0) >= last
            }
            let records = try store.commits(after: before)
            #expect(records.count == 40)
            #expect(records.compactMap { try? $0.changes.first?.storedValue() } == (1...40).map { .int(Int64($0)) })
            try await mirror.stop()
        }
    }

    @Test func aMirrorKilledWhileApplyingIsResumedWithoutLossOrRepeat() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryDirectoryAsync { path in
            let other = try await mirrorProcess(path, etcd)
            let store = try PersistentDefaults(path: path)
            let before = try store.lastSequence()
            var last: Int64 = 0
            for value in 1...150 {
                last = try etcd.put("/fleet/svc/counter", typedInt(value))
                if value == 60 { other.kill() }  // SIGKILL while it applies the revisions coming in
            }
            let mirror = try fleetMirror(store, etcd)
            try await mirror.start()
            try await waitUntil("the resumed mirror applied every revision") { mirror.appliedRevision >= last }
            // Each revision exactly once, in order, whichever process applied it.
            let values = try store.commits(after: before).compactMap { try? $0.changes.first?.storedValue() }
            #expect(values == (1...150).map { .int(Int64($0)) })
            try await mirror.stop()
        }
    }

    @Test func afterACompactionTheMirrorReReadsThePrefixAndAppliesTheDifferenceInOneCommit() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            _ = try etcd.put("/fleet/svc/banner", #"{"type":"string","value":"old"}"#)
            try await runMirrorOnce(store, etcd)
            for value in 1...5 { _ = try etcd.put("/fleet/svc/counter", typedInt(value)) }
            _ = try etcd.delete("/fleet/svc/banner")
            let newest = try etcd.put("/other/noise", typedInt(0))
            try etcd.compact(newest)
            let before = try store.lastSequence()
            let second = try fleetMirror(store, etcd)
            try await second.start()
            try await waitUntil("the re-read is applied") { second.appliedRevision >= newest }
            #expect(store[.counter] == 5)
            #expect(try !store.contains(.banner))
            let records = try store.commits(after: before)
            #expect(records.count == 1)
            try await second.stop()
        }
    }

    /// etcd compacted at exactly the revision after the recorded one, a deletion: a compaction
    /// drops the tombstones at its revision, so a watch from that revision is accepted (it is not
    /// older than the compaction) and never delivers the deletion. The restart used to watch from
    /// there and return, after a progress notification, with the deleted key still here.
    @Test func aDeletionAtTheRevisionEtcdCompactedAtIsNotLostByARestart() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            _ = try etcd.put("/fleet/svc/banner", #"{"type":"string","value":"old"}"#)
            _ = try etcd.put("/fleet/svc/counter", typedInt(1))
            try await runMirrorOnce(store, etcd)
            let deleted = try etcd.delete("/fleet/svc/banner")
            try etcd.compact(deleted)
            let second = try fleetMirror(store, etcd)
            try await second.start()
            #expect(try !store.contains(.banner))
            #expect(store[.counter] == 1)
            try await second.stop()
        }
    }

    @Test func mirroredKeysRefuseEveryOtherWriter() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryStoreAsync { store, _, log in
            _ = try etcd.put("/fleet/svc/maxConnections", typedInt(300))
            // A commit before the mirror exists: the next write transaction may take the mirror
            // owners it read (none) from it, unless the mirror's record in meta invalidates them.
            store[.unrelated] = 0
            let mirror = try fleetMirror(store, etcd)
            try await mirror.start()
            let before = try store.lastSequence()
            #expect(
                throws: PersistentDefaultsError.ownedByMirror(
                    key: "fleet.maxConnections", localPrefix: "fleet.", etcdPrefix: "/fleet/svc/")
            ) {
                try store.set(1, for: .mirroredMax)
            }
            #expect(throws: PersistentDefaultsError.self) {
                try store.write { tx in
                    tx[.unrelated] = 1
                    tx[.mirroredMax] = 2
                }
            }
            #expect(throws: PersistentDefaultsError.self) { try store.setStoredValue(.int(3), named: "fleet.new") }
            #expect(throws: PersistentDefaultsError.self) { try store.remove(.mirroredMax) }
            store[.mirroredMax] = 4  // Reported, not applied.
            #expect(log.all.contains { if case .ownedByMirror = $0 { true } else { false } })
            #expect(store[.mirroredMax] == 300)
            #expect(store[.unrelated] == 0)
            #expect(try store.lastSequence() == before)
            // Other keys are written as usual, and the mirror writes through etcd.
            store[.unrelated] = 5
            #expect(store[.unrelated] == 5)
            try await mirror.set(301, for: .mirroredMax)
            #expect(store[.mirroredMax] == 301)
            #expect(try etcd.range("/fleet/svc/").values["/fleet/svc/maxConnections"] == typedInt(301))
            try await mirror.stop()
            // Stopped, the mirror still owns its keys.
            #expect(throws: PersistentDefaultsError.self) { try store.set(1, for: .mirroredMax) }
        }
    }

    @Test func aValueThatDoesNotParseIsReportedAndTheRestOfItsRevisionApplied() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryStoreAsync { store, _, log in
            _ = try etcd.put("/fleet/svc/maxConnections", typedInt(300))
            let mirror = try fleetMirror(store, etcd)
            try await mirror.start()
            let revision = try etcd.txn([
                ("/fleet/svc/maxConnections", "300 connections"),
                ("/fleet/svc/banner", #"{"type":"string","value":"ok"}"#),
                ("/fleet/svc/counter", #"{"type":"integer","value":1}"#),
            ])
            try await waitUntil("the revision is applied") { mirror.appliedRevision >= revision }
            #expect(store[.banner] == "ok")
            #expect(store[.mirroredMax] == 300)
            #expect(try !store.contains(.counter))
            let failures = log.all.compactMap { error -> String? in
                if case .decodingFailed(let key, _, _) = error { key } else { nil }
            }
            #expect(Set(failures) == ["fleet.maxConnections", "fleet.counter"])
            try await mirror.stop()
        }
    }

    /// An operator's value that does not parse, arriving through the watch: a read-modify-write
    /// of its key is refused and changes nothing in etcd until a good value or a delete arrives;
    /// a `set` (no read) still overwrites it. `update` used to write `transform` of the last good
    /// value over the operator's: its compare on `mod_revision` passed, since the mirror had
    /// applied (and skipped) that revision.
    @Test func aReadModifyWriteOfAKeyWhoseEtcdValueDoesNotParseIsRefused() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryStoreAsync { store, _, _ in
            _ = try etcd.put("/fleet/svc/maxConnections", typedInt(300))
            let mirror = try fleetMirror(store, etcd)
            try await mirror.start()
            func putAndWait(_ value: String?) async throws -> Int64 {
                let revision =
                    try value.map { try etcd.put("/fleet/svc/maxConnections", $0) }
                    ?? etcd.delete("/fleet/svc/maxConnections")
                try await waitUntil("revision \(revision) is applied") { mirror.appliedRevision >= revision }
                return revision
            }
            func etcdValue() throws -> String? { try etcd.range("/fleet/svc/").values["/fleet/svc/maxConnections"] }

            let garbage = try await putAndWait("not a number")
            let refused = EtcdMirrorError.unparsableValue(key: "fleet.maxConnections", revision: garbage)
            await #expect(throws: refused) { try await mirror.update(.mirroredMax) { $0 + 1 } }
            await #expect(throws: refused) { try await mirror.write { tx in tx[.counter] = tx[.mirroredMax] } }
            #expect(try etcdValue() == "not a number")
            #expect(try !store.contains(.counter))
            #expect(store[.mirroredMax] == 300)  // The last good value, for local reads.
            #expect(mirror.checkConsistency() == [])  // The record agrees with etcd.

            _ = try await putAndWait(typedInt(400))
            try await mirror.update(.mirroredMax) { $0 + 1 }
            #expect(try etcdValue() == typedInt(401))

            // A delete clears it too; a set, which reads nothing, overwrites it.
            _ = try await putAndWait(#"{"type":"int","value":"#)
            _ = try await putAndWait(nil)
            try await mirror.update(.mirroredMax) { $0 + 1 }
            #expect(try etcdValue() == typedInt(101))
            _ = try await putAndWait("still not a number")
            try await mirror.set(7, for: .mirroredMax)
            #expect(try etcdValue() == typedInt(7))
            try await mirror.update(.mirroredMax) { $0 + 1 }
            #expect(try etcdValue() == typedInt(8))
            try await mirror.stop()
        }
    }

    /// The same after a restart: a mirror that starts on the store knows the key's etcd value does
    /// not parse — from its initial copy, from the store's record, and from its catch-up when the
    /// record comes from a library that did not keep such keys.
    @Test func aRestartedMirrorStillRefusesAReadModifyWriteOfAKeyWhoseEtcdValueDoesNotParse() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            let garbage = try etcd.put("/fleet/svc/maxConnections", "not a number")
            let refused = EtcdMirrorError.unparsableValue(key: "fleet.maxConnections", revision: garbage)
            for round in 0..<3 {
                if round == 2 {
                    try forgetUnparsableKeys(store)
                    _ = try etcd.put("/fleet/svc/banner", #"{"type":"string","value":"hi"}"#)  // A catch-up.
                }
                let mirror = try fleetMirror(store, etcd)
                try await mirror.start()
                await #expect(throws: refused, "round \(round)") { try await mirror.update(.mirroredMax) { $0 + 1 } }
                #expect(try etcd.range("/fleet/svc/").values["/fleet/svc/maxConnections"] == "not a number")
                try await mirror.stop()
            }
            let mirror = try fleetMirror(store, etcd)
            try await mirror.start()
            let good = try etcd.put("/fleet/svc/maxConnections", typedInt(400))
            try await waitUntil("the good value is applied") { mirror.appliedRevision >= good }
            try await mirror.update(.mirroredMax) { $0 + 1 }
            #expect(try etcd.range("/fleet/svc/").values["/fleet/svc/maxConnections"] == typedInt(401))
            try await mirror.stop()
        }
    }

    /// Two etcd keys whose names under the prefix are not UTF-8 (`a\u{FF}`, `a\u{FE}`) have no
    /// local name: they used to be stored under one repaired name (`fleet.a\u{FFFD}`, the last one
    /// winning), which then never matched etcd, so every consistency check "repaired" it.
    @Test func anEtcdKeyWhoseNameIsNotUTF8IsReportedAndNotApplied() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryStoreAsync { store, _, log in
            let client = try etcd.client
            let first = Array("/fleet/svc/a".utf8) + [0xFF]
            _ = try client.put(key: first, value: Array(typedInt(1).utf8))
            _ = try client.put(key: Array("/fleet/svc/a".utf8) + [0xFE], value: Array(typedInt(2).utf8))
            let mirror = try fleetMirror(store, etcd)
            try await mirror.start()
            #expect(try store.keyNames() == [])
            // Through the watch too: a revision with such a key applies its other keys.
            let revision = try client.txn(
                EtcdTxnRequest(
                    compare: [],
                    success: [
                        .delete(key: Data(first)),
                        .put(key: Data("/fleet/svc/counter".utf8), value: Data(typedInt(3).utf8)),
                    ])
            ).header.revision
            try await waitUntil("the revision is applied") { mirror.appliedRevision >= revision }
            #expect(try store.keyNames() == ["fleet.counter"])
            #expect(mirror.checkConsistency() == [])
            #expect(log.all.contains { if case .invalidKeyName = $0 { true } else { false } })
            #expect(!log.all.contains { if case .mirrorRepaired = $0 { true } else { false } })
            try await mirror.stop()
        }
    }

    @Test func theConsistencyCheckRepairsADivergentLocalCopy() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryStoreAsync { store, _, log in
            _ = try etcd.put("/fleet/svc/maxConnections", typedInt(300))
            var options = testOptions()
            options.consistencyCheckInterval = .milliseconds(200)
            let mirror = try fleetMirror(store, etcd, options: options)
            try await mirror.start()
            // What a dropped watch event leaves: the local copy differs, the revision does not.
            try store.core.write { writer in
                writer.appliesMirror = true
                try writer.set(1, for: .mirroredMax)
                try writer.set("stray", for: .banner)
            }
            #expect(store[.mirroredMax] == 1)
            try await waitUntil("the check repaired the copy") {
                try store[.mirroredMax] == 300 && !store.contains(.banner)
            }
            // Reported once the repair has committed: the test may see the repair first.
            try await waitUntil("the repair is reported") {
                log.all.contains { error in
                    if case .mirrorRepaired(let prefix, _, let keys) = error {
                        prefix == "fleet." && Set(keys) == ["fleet.maxConnections", "fleet.banner"]
                    } else {
                        false
                    }
                }
            }
            try await mirror.stop()
        }
    }

    @Test func badInputIsRefusedWithClearErrors() async throws {
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            #expect(throws: EtcdMirrorError.self) {
                try EtcdMirror(store: store, endpoints: ["127.0.0.1:2379"], etcdPrefix: "/p/", localPrefix: "p.")
            }
            #expect(throws: EtcdMirrorError.self) {
                try EtcdMirror(store: store, endpoints: [], etcdPrefix: "/p/", localPrefix: "p.")
            }
            #expect(throws: EtcdMirrorError.self) {
                try EtcdMirror(store: store, endpoints: ["http://127.0.0.1:1"], etcdPrefix: "/p/", localPrefix: "")
            }
            let port = try freePorts(1)[0]
            var options = testOptions()
            options.startTimeout = .milliseconds(300)
            options.requestTimeout = .milliseconds(300)
            let mirror = try EtcdMirror(
                store: store, endpoints: ["http://127.0.0.1:\(port)"], etcdPrefix: "/p/", localPrefix: "p.",
                options: options)
            await #expect(throws: EtcdMirrorError.self) { try await mirror.start() }
            #expect(mirror.state == .stopped)
            await #expect(throws: EtcdMirrorError.notRunning) { try await mirror.set(1, for: .init("p.x", default: 0)) }
            // Another mirror may not own an overlapping prefix, nor the same one for another etcd prefix.
            #expect(throws: EtcdMirrorError.self) {
                try EtcdMirror(
                    store: store, endpoints: ["http://127.0.0.1:\(port)"], etcdPrefix: "/p/", localPrefix: "p.sub.")
            }
            #expect(throws: EtcdMirrorError.self) {
                try EtcdMirror(
                    store: store, endpoints: ["http://127.0.0.1:\(port)"], etcdPrefix: "/q/", localPrefix: "p.")
            }
        }
    }

    @Test func aKeyOutsideThePrefixIsNotWrittenThroughTheMirror() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            let mirror = try fleetMirror(store, etcd)
            try await mirror.start()
            await #expect(throws: EtcdMirrorError.keyOutsidePrefix(key: "local.unrelated", localPrefix: "fleet.")) {
                try await mirror.set(1, for: .unrelated)
            }
            var kept: EtcdMirrorTransaction?
            try await mirror.write { tx in
                tx[.mirroredMax] = 300
                tx[.banner] = "maintenance at 22:00"
                kept = tx
            }
            #expect(store[.mirroredMax] == 300)
            #expect(store[.banner] == "maintenance at 22:00")
            #expect(throws: PersistentDefaultsError.usedAfterClosure(type: "EtcdMirrorTransaction")) {
                try kept?.value(for: .mirroredMax)
            }
            try await mirror.stop()
        }
    }

    /// An update whose key another host changed is retried once that change is applied here. It
    /// used to wait for etcd's newest revision, which the watch of the prefix never delivers when
    /// it belongs to another prefix: with etcd's default progress interval (10 min) the update
    /// threw `notAppliedLocally` after the request timeout.
    @Test func anUpdateInConflictIsRetriedWhenEtcdsNewestRevisionIsOutsideThePrefix() async throws {
        try await withCounterMirrorOfQuietEtcd { etcd, store, mirror in
            let attempts = Guarded(0)
            try await mirror.update(.counter) { value in
                let attempt = attempts.withLock { count in
                    count += 1
                    return count
                }
                if attempt == 1 {
                    // Another host changes the key, then another service writes elsewhere in etcd.
                    _ = try etcd.put("/fleet/svc/counter", typedInt(10))
                    _ = try etcd.put("/other/noise", typedInt(0))
                }
                return value + 1
            }
            #expect(store[.counter] == 11)
            #expect(attempts.withLock { $0 } == 2)
        }
    }

    /// Removing a key etcd does not have makes no etcd revision; the answer carries etcd's newest,
    /// which may belong to another prefix. The removal used to wait for that revision and throw
    /// `notAppliedLocally` after the request timeout; it now returns once the key is absent here.
    @Test func removingAKeyEtcdDoesNotHaveReturnsWhenEtcdsNewestRevisionIsOutsideThePrefix() async throws {
        try await withCounterMirrorOfQuietEtcd { etcd, store, mirror in
            _ = try etcd.put("/other/noise", typedInt(0))
            try await mirror.write { $0.remove(.banner) }
            #expect(try !store.contains(.banner))
            #expect(store[.counter] == 1)
        }
    }

    /// Each key a write read must be unchanged in etcd when its transaction commits: modified,
    /// deleted (the case that needs a key present at the read to cost two comparisons) or created
    /// after the read, the transaction fails and the body runs again on the newer value.
    @Test func aWriteConflictsWithAChangeDeletionOrCreationOfAKeyItRead() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            _ = try etcd.put("/fleet/svc/counter", typedInt(1))
            let mirror = try fleetMirror(store, etcd)
            try await mirror.start()
            /// `update(.counter) { $0 + 1 }` while an operator runs `change` during its first try.
            func increment(whileAnOperator change: @escaping () throws -> Void) async throws -> Int {
                let attempts = Guarded(0)
                try await mirror.update(.counter) { value in
                    let attempt = attempts.withLock { count in
                        count += 1
                        return count
                    }
                    if attempt == 1 { try change() }
                    return value + 1
                }
                return attempts.withLock { $0 }
            }
            func etcdCounter() throws -> String? { try etcd.range("/fleet/svc/").values["/fleet/svc/counter"] }

            #expect(try await increment { _ = try etcd.put("/fleet/svc/counter", typedInt(10)) } == 2)
            #expect(try etcdCounter() == typedInt(11))
            // Present when read, deleted before the commit: not written back from the stale 11.
            #expect(try await increment { _ = try etcd.delete("/fleet/svc/counter") } == 2)
            #expect(try etcdCounter() == typedInt(1))
            let deleted = try etcd.delete("/fleet/svc/counter")
            try await waitUntil("the deletion is applied") { mirror.appliedRevision >= deleted }
            // Absent when read, created before the commit.
            #expect(try await increment { _ = try etcd.put("/fleet/svc/counter", typedInt(20)) } == 2)
            #expect(try etcdCounter() == typedInt(21))
            #expect(store[.counter] == 21)
            try await mirror.stop()
        }
    }

    /// etcd's default `--max-txn-ops` is 128, for the comparisons and for the writes apart: a write
    /// may read 64 keys that exist (two comparisons each) or 128 that do not (one), and set 128.
    /// One more fails with `tooManyOperations` before anything is sent, and etcd is unchanged.
    @Test func aWriteOverEtcdsOperationLimitFailsBeforeAnythingIsSent() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            let present = (0..<65).map { PersistentDefaults.Key<Int>("fleet.present\($0)", default: 0) }
            let absent = (0..<129).map { PersistentDefaults.Key<Int>("fleet.absent\($0)", default: 0) }
            _ = try etcd.txn(present.map { ("/fleet/svc/" + $0.name.dropFirst("fleet.".count), typedInt(1)) })
            let mirror = try fleetMirror(store, etcd)
            try await mirror.start()
            /// Reads `reads`, sets `.counter` to their sum and `sets`' keys to 2.
            func write(reading reads: [PersistentDefaults.Key<Int>], setting sets: [PersistentDefaults.Key<Int>] = [])
                async throws
            {
                try await mirror.write { tx in
                    tx[.counter] = reads.reduce(0) { $0 + tx[$1] }
                    for key in sets { tx[key] = 2 }
                }
            }

            try await write(reading: Array(present.prefix(64)))
            #expect(store[.counter] == 64)
            try await write(reading: Array(absent.prefix(128)))
            #expect(store[.counter] == 0)
            try await write(reading: [], setting: Array(absent.prefix(127)))  // With .counter: 128 writes.
            #expect(store[absent[126]] == 2)

            let before = try etcd.range("/fleet/svc/")
            await #expect(throws: EtcdMirrorError.tooManyOperations(count: 130, limit: 128)) {
                try await write(reading: present)
            }
            await #expect(throws: EtcdMirrorError.tooManyOperations(count: 129, limit: 128)) {
                try await write(reading: Array(present.prefix(64)) + [absent[128]])
            }
            await #expect(throws: EtcdMirrorError.tooManyOperations(count: 129, limit: 128)) {
                try await write(reading: [], setting: Array(absent.prefix(128)))
            }
            let after = try etcd.range("/fleet/svc/")
            #expect(after.revision == before.revision)
            #expect(after.values.count == before.values.count)
            try await mirror.stop()
        }
    }

    @Test func twoHostsIncrementingOneKey100TimesEachEndAtExactly200More() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryDirectoryAsync { first in
            try await withTemporaryDirectoryAsync { second in
                let stores = [try PersistentDefaults(path: first), try PersistentDefaults(path: second)]
                let mirrors = try stores.map { store in
                    try fleetMirror(store, etcd)
                }
                for mirror in mirrors { try await mirror.start() }
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for mirror in mirrors {
                        group.addTask {
                            for _ in 0..<100 { try await mirror.update(.counter) { $0 + 1 } }
                        }
                    }
                    try await group.waitForAll()
                }
                let (values, revision) = try etcd.range("/fleet/svc/")
                #expect(values["/fleet/svc/counter"] == typedInt(200))
                try await waitUntil("both hosts applied the last revision") {
                    mirrors.allSatisfy { $0.appliedRevision >= revision }
                }
                #expect(stores.map { $0[.counter] } == [200, 200])
                for mirror in mirrors { try await mirror.stop() }
            }
        }
    }
}
