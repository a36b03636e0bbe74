import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

/// What a test does to etcd as an operator would, through the library's own etcd client.
extension EtcdCluster {
    /// A client of every member, as the mirror under test uses.
    var client: EtcdClient {
        get throws {
            try EtcdClient(
                endpoints: endpoints, requestTimeout: .seconds(10), connectTimeout: .seconds(1),
                maxBackoff: .milliseconds(200))
        }
    }

    /// The index of the leader, from `/v3/maintenance/status` of each live member.
    func leader() throws -> Int {
        struct Status: Decodable {
            var header: EtcdHeader
            var leader: String
        }
        for index in 0..<size where isRunning(index) {
            let single = try EtcdClient(
                endpoints: [endpoint(index)], requestTimeout: .seconds(5), connectTimeout: .seconds(1),
                maxBackoff: .milliseconds(100))
            let status: Status = try single.call("/v3/maintenance/status", [String: String](), safeToRepeat: true)
            if status.leader == status.header.memberID { return index }
        }
        throw EtcdTestError("no member is the leader")
    }

    /// Puts `value` at `key`; the revision of the put.
    func put(_ key: String, _ value: String) throws -> Int64 {
        try client.put(key: Array(key.utf8), value: Array(value.utf8))
    }

    /// Deletes `key`; the revision of the delete.
    func delete(_ key: String) throws -> Int64 {
        try client.txn(EtcdTxnRequest(compare: [], success: [.delete(key: Data(key.utf8))])).header.revision
    }

    /// One etcd transaction of puts (value nil: delete).
    func txn(_ operations: [(String, String?)]) throws -> Int64 {
        let success = operations.map { key, value -> EtcdOperation in
            value.map { .put(key: Data(key.utf8), value: Data($0.utf8)) } ?? .delete(key: Data(key.utf8))
        }
        return try client.txn(EtcdTxnRequest(compare: [], success: success)).header.revision
    }

    /// Compacts the history up to `revision`.
    func compact(_ revision: Int64) throws {
        struct Compaction: Encodable {
            var revision: String
            var physical = true
        }
        let _: EtcdHeaderResponse = try client.call(
            "/v3/kv/compaction", Compaction(revision: String(revision)), safeToRepeat: true)
    }

    /// The keys under `prefix` with their values, and the revision read at.
    func range(_ prefix: String) throws -> (values: [String: String], revision: Int64) {
        let response = try client.range(prefix: Array(prefix.utf8))
        var values: [String: String] = [:]
        for kv in response.kvs {
            values[String(decoding: kv.key, as: UTF8.self)] = String(decoding: kv.value, as: UTF8.self)
        }
        return (values, response.header.revision)
    }
}

/// Waits until `condition` holds, checking it every 10 ms, for at most `timeout`; records an
/// issue and throws when it never does.
func waitUntil(
    _ what: String, timeout: Duration = .seconds(60), sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while try !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("timed out after \(timeout) waiting until \(what)", sourceLocation: sourceLocation)
            throw EtcdTestError("timed out waiting until \(what)")
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// The typed JSON form of an Int, as an operator writes it with `etcdctl put`.
func typedInt(_ value: Int) -> String { #"{"type":"int","value":\#(value)}"# }
