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
}
