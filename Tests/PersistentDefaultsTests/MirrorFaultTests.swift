import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

/// The local keys under `prefix` as typed JSON, to compare with an etcd range.
private func localCopy(_ store: PersistentDefaults, prefix: String) throws -> [String: String] {
    var copy: [String: String] = [:]
    for name in try store.keyNames() where name.hasPrefix(prefix) {
        copy[name] = try store.storedValue(named: name)?.typedJSON
    }
    return copy
}

/// etcd's keys under `etcdPrefix`, named as local keys, values normalised to the typed JSON form.
private func etcdCopy(_ etcd: EtcdCluster, etcdPrefix: String, localPrefix: String) throws -> [String: String] {
    var copy: [String: String] = [:]
    for (key, value) in try etcd.range(etcdPrefix).values {
        copy[localPrefix + key.dropFirst(etcdPrefix.count)] = try StoredValue(typedJSON: Array(value.utf8)).typedJSON
    }
    return copy
}

private func faultOptions() -> EtcdMirror.Options {
    var options = EtcdMirror.Options()
    options.connectTimeout = .milliseconds(300)
    options.maxBackoff = .milliseconds(200)
    options.consistencyCheckInterval = .seconds(3600)
    return options
}

@Suite(.serialized, .timeLimit(.minutes(3)))
struct MirrorFaultTests {
    @Test func killingTheLeaderAndTheMemberTheMirrorTalksToLosesNoRevision() async throws {
        let etcd = try EtcdCluster(size: 3)
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            let mirror = try EtcdMirror(
                store: store, endpoints: etcd.endpoints, etcdPrefix: "/fleet/svc/", localPrefix: "fleet.",
                options: faultOptions())
            try await mirror.start()
            let seen = Guarded<[Int64]>([])
            let token = store.observe(prefix: "fleet.") { _ in seen.withLock { $0.append(1) } }
            var last: Int64 = 0
            var killed = 0
            for round in 0..<3 {
                for index in 0..<10 {
                    last = try etcd.put("/fleet/svc/key\(index % 4)", typedInt(round * 100 + index))
                }
                switch round {
                case 0:
                    let leader = try etcd.leader()
                    etcd.kill(leader)
                    killed = leader
                case 1:
                    // Back to three members, then down the one the watch talks to.
                    try etcd.start(killed)
                    try etcd.waitUntilServing(killed)
                    etcd.kill(mirror.status.withLock { $0.watchEndpoint })
                default: break
                }
            }
            try await waitUntil("the mirror applied the last write", timeout: .seconds(20)) {
                mirror.appliedRevision >= last
            }
            #expect(
                try localCopy(store, prefix: "fleet.")
                    == etcdCopy(etcd, etcdPrefix: "/fleet/svc/", localPrefix: "fleet."))
            #expect(seen.withLock { $0.count } == 30)
            token.cancel()
            try await mirror.stop()
        }
    }

    @Test func withEveryMemberDownReadsKeepTheLastValuesAndTheMirrorCatchesUpLater() async throws {
        let etcd = try EtcdCluster(size: 3)
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            let key = PersistentDefaults.Key<Int>("fleet.limit", default: 0)
            _ = try etcd.put("/fleet/svc/limit", typedInt(1))
            let mirror = try EtcdMirror(
                store: store, endpoints: etcd.endpoints, etcdPrefix: "/fleet/svc/", localPrefix: "fleet.",
                options: faultOptions())
            try await mirror.start()
            let revision = mirror.appliedRevision
            for index in 0..<3 { etcd.kill(index) }
            try await waitUntil("the mirror says it is reconnecting") {
                if case .reconnecting(_, let lastRevision) = mirror.state { lastRevision == revision } else { false }
            }
            #expect(store[key] == 1)
            await #expect(throws: EtcdMirrorError.self) { try await mirror.set(2, for: key) }
            for index in 0..<3 { try etcd.start(index) }
            for index in 0..<3 { try etcd.waitUntilServing(index) }
            let changed = try etcd.put("/fleet/svc/limit", typedInt(3))
            try await waitUntil("the mirror caught up", timeout: .seconds(20)) { mirror.appliedRevision >= changed }
            #expect(store[key] == 3)
            #expect(mirror.state == .live(revision: changed))
            try await mirror.stop()
        }
    }

    /// The member the watch talks to hangs (SIGSTOP: its connections stay open, and the kernel
    /// still answers TCP keep-alive) while the other two go on. The watch used to wait on it for
    /// as long as it hung: the mirror said `.live` and missed every later revision. Now, when the
    /// local copy differs from etcd's newest state at two consistency checks in a row and the
    /// watch applied nothing in between, the watch moves to the next member.
    @Test func aWatchWhoseMemberHangsMovesToAnotherMember() async throws {
        let etcd = try EtcdCluster(size: 3)
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            let key = PersistentDefaults.Key<Int>("fleet.limit", default: 0)
            var options = faultOptions()
            options.consistencyCheckInterval = .seconds(1)
            options.requestTimeout = .seconds(3)
            let mirror = try EtcdMirror(
                store: store, endpoints: etcd.endpoints, etcdPrefix: "/fleet/svc/", localPrefix: "fleet.",
                options: options)
            try await mirror.start()
            let first = try etcd.put("/fleet/svc/limit", typedInt(1))
            try await waitUntil("the first put is applied") { mirror.appliedRevision >= first }
            let hung = mirror.status.withLock { $0.watchEndpoint }
            etcd.setPaused(hung, true)
            defer { etcd.setPaused(hung, false) }
            let others = try EtcdClient(
                endpoints: etcd.endpoints.indices.filter { $0 != hung }.map { etcd.endpoint($0) },
                requestTimeout: .seconds(20), connectTimeout: .seconds(1), maxBackoff: .milliseconds(200))
            let revision = try others.put(key: Array("/fleet/svc/limit".utf8), value: Array(typedInt(2).utf8))
            try await waitUntil("a put made while the watch's member hangs is applied", timeout: .seconds(40)) {
                mirror.appliedRevision >= revision
            }
            // Applied, so the watch moved: only the watch applies revisions newer than the applied
            // one (the consistency check repairs at the applied revision), and the hung member
            // delivers nothing. Where the watch stands now is not asserted: it may have moved on
            // again since, round the members (one that fails while the cluster settles without
            // the hung one), back to the hung one too — asserted, it failed once in a run of 156
            // tests under load, with the put applied all the same.
            #expect(store[key] == 2)
            etcd.setPaused(hung, false)
            try await mirror.stop()
        }
    }

    /// The watch loses its member while a restarted mirror's `start()` waits for the catch-up: it
    /// reconnects and catches up, so `start()` returns. The failure used to set the state from
    /// `.starting` to `.reconnecting` (then `.live`), and `start()`, finding it no longer
    /// `.starting`, took the mirror for stopped: it threw `notRunning` and stopped the mirror.
    @Test func aStartWhoseWatchReconnectsDuringTheCatchUpSucceeds() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryDirectoryAsync { path in
            let store = try boundedStore(at: path)
            let first = try fleetMirror(store, etcd)
            try await first.start()
            try await first.stop()
            // More than the 1,000 revisions etcd sends in one response to a watcher catching up:
            // the catch-up needs a second response, which only a new connection brings.
            var last: Int64 = 0
            for value in 1...1_010 { last = try etcd.put("/fleet/svc/counter", typedInt(value)) }
            // Holds the watch thread in the first commit of the catch-up until the member is down.
            let entered = Guarded(false)
            let release = DispatchSemaphore(value: 0)
            let token = store.observe(prefix: "fleet.") { _ in
                guard !entered.withLock({ $0 }) else { return }
                entered.withLock { $0 = true }
                _ = release.wait(timeout: .now() + 60)
            }
            let second = try fleetMirror(store, etcd)
            let starting = Task { try await second.start() }
            try await waitUntil("the catch-up began", timeout: .seconds(30)) { entered.withLock { $0 } }
            etcd.kill(0)
            release.signal()
            try await waitUntil("the watch lost its member", timeout: .seconds(30)) {
                if case .reconnecting = second.state { true } else { false }
            }
            try etcd.start(0)
            try etcd.waitUntilServing(0)
            try await starting.value
            // Caught up when `start()` returns; the watch may still be between connections then
            // (seen under ThreadSanitizer: `.reconnecting` at the last revision), and goes live.
            #expect(second.appliedRevision == last)
            try await waitUntil("the watch is live", timeout: .seconds(30)) { second.state == .live(revision: last) }
            #expect(store[counter] == 1_010)
            token.cancel()
            try await second.stop()
        }
    }

    /// An etcd member restarted without its data (or from an older backup) keeps its cluster ID
    /// and starts its revisions over. A mirror whose store recorded a newer revision used to take
    /// the store for up to date — keeping values etcd no longer had — and to watch from a
    /// revision in etcd's future, missing every put until etcd passed the old number.
    @Test func aMirrorStartedAfterEtcdLostItsHistoryCopiesEtcdAgainAndFollowsIt() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryStoreAsync { store, _, log in
            let first = try fleetMirror(store, etcd)
            try await first.start()
            let old = try writeOldHistory(etcd)
            try await waitUntil("the mirror applied the old history", timeout: .seconds(20)) {
                first.appliedRevision >= old
            }
            try await first.stop()
            try etcd.restartWithoutData(0)
            _ = try etcd.put("/fleet/svc/maxConnections", typedInt(300))
            let revision = try etcd.put("/fleet/svc/counter", typedInt(9))
            #expect(revision < old, "etcd's history did not go back")
            let before = try store.lastSequence()
            let second = try fleetMirror(store, etcd)
            try await second.start()
            #expect(try localCopy(store, prefix: "fleet.") == etcdCopy(etcd))
            #expect(try store.commits(after: before).count == 1)
            #expect(try store.mirroredPrefixes().first?.revision == revision)
            #expect(repairs(log) == [revision])
            let later = try etcd.put("/fleet/svc/counter", typedInt(10))
            try await waitUntil("a later put arrived", timeout: .seconds(20)) {
                try localCopy(store, prefix: "fleet.") == etcdCopy(etcd) && second.appliedRevision == later
            }
            #expect(try store.commits(after: before).count == 2)
            try await second.stop()
        }
    }

    /// The same while two mirrors of one store run (as two processes of a host would): their
    /// watches reconnect to the restarted member; one of them applies etcd's new state in one
    /// commit, the other notices and follows from there, and every later revision is one commit.
    @Test func runningMirrorsFollowEtcdAfterItLostItsHistoryApplyingTheDifferenceOnce() async throws {
        let etcd = try EtcdCluster()
        try await withTemporaryStoreAsync { store, _, log in
            let mirrors = try (0..<2).map { _ in try fleetMirror(store, etcd) }
            for mirror in mirrors { try await mirror.start() }
            let old = try writeOldHistory(etcd)
            try await waitUntil("both mirrors applied the old history", timeout: .seconds(20)) {
                mirrors.allSatisfy { $0.appliedRevision >= old }
            }
            let before = try store.lastSequence()
            let commits = Guarded(0)
            let token = store.observe(prefix: "fleet.") { _ in commits.withLock { $0 += 1 } }
            try etcd.restartWithoutData(0)
            _ = try etcd.put("/fleet/svc/maxConnections", typedInt(300))
            #expect(try etcd.put("/fleet/svc/counter", typedInt(9)) < old, "etcd's history did not go back")
            try await waitUntil("the local copy equals etcd again", timeout: .seconds(20)) {
                try localCopy(store, prefix: "fleet.") == etcdCopy(etcd)
            }
            let later = try etcd.put("/fleet/svc/counter", typedInt(10))
            try await waitUntil("a later put arrived at both mirrors", timeout: .seconds(20)) {
                store[counter] == 10 && mirrors.allSatisfy { $0.state == .live(revision: later) }
            }
            #expect(try localCopy(store, prefix: "fleet.") == etcdCopy(etcd))
            // One commit for the new history up to the revision repaired, then one per revision.
            let repaired = repairs(log)
            #expect(repaired.count == 1)
            let expected = 1 + Int(later - (repaired.first ?? later))
            // What the commits changed, for a failure's message (this test failed once in six CI
            // runs under ThreadSanitizer, with no values recorded).
            let records = try store.commits(after: before)
            let changed = records.map { "#\($0.sequence): \($0.changes.map(\.key))" }
            #expect(
                records.count == expected,
                "repaired at \(repaired), later \(later), old \(old): \(changed); errors \(log.all)")
            try await waitUntil("the observer saw every commit", timeout: .seconds(20)) {
                commits.withLock { $0 } >= expected
            }
            #expect(commits.withLock { $0 } == expected)
            #expect(try store.mirroredPrefixes().first?.revision == later)
            token.cancel()
            for mirror in mirrors { try await mirror.stop() }
        }
    }
}

private let counter = PersistentDefaults.Key<Int>("fleet.counter", default: 0)

/// A mirror of etcd's `/fleet/svc/` into the store's `fleet.` keys, with the fault timings.
private func fleetMirror(_ store: PersistentDefaults, _ etcd: EtcdCluster) throws -> EtcdMirror {
    try EtcdMirror(
        store: store, endpoints: etcd.endpoints, etcdPrefix: "/fleet/svc/", localPrefix: "fleet.",
        options: faultOptions())
}

/// Seven revisions under `/fleet/svc/`, the last setting a banner that the new history lacks;
/// the revision of the last.
private func writeOldHistory(_ etcd: EtcdCluster) throws -> Int64 {
    for value in 1...6 { _ = try etcd.put("/fleet/svc/counter", typedInt(value)) }
    return try etcd.put("/fleet/svc/banner", #"{"type":"string","value":"old"}"#)
}

/// etcd's `/fleet/svc/` as local `fleet.` keys.
private func etcdCopy(_ etcd: EtcdCluster) throws -> [String: String] {
    try etcdCopy(etcd, etcdPrefix: "/fleet/svc/", localPrefix: "fleet.")
}

/// The revisions of the `mirrorRepaired` reports of the `fleet.` mirrors.
private func repairs(_ log: ErrorLog) -> [Int64] {
    log.all.compactMap { error in
        if case .mirrorRepaired("fleet.", let revision, _) = error { revision } else { nil }
    }
}
