import Foundation
import Testing

@testable import PersistentDefaults

/// etcd members started by a test: on loopback ports chosen at run time, in a temporary data
/// directory, ended by process id (SIGKILL) when the test ends. A machine without the `etcd`
/// binary fails the test with a clear message: the mirror tests never skip.
final class EtcdCluster: @unchecked Sendable {
    // @unchecked Sendable: `members` is changed only under `lock`; the rest is set in `init`.
    struct Member {
        var name: String
        var clientPort: Int
        var peerPort: Int
        var process: Process?
        var endpoint: String { "http://127.0.0.1:\(clientPort)" }
    }

    static let executable = ["/usr/bin/etcd", "/usr/local/bin/etcd"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    let directory: String
    private let lock = NSLock()
    private var members: [Member] = []
    let client: EtcdClient

    /// Starts `size` members forming one cluster and waits (10 s at most) until each answers.
    init(size: Int = 1) throws {
        guard Self.executable != nil else {
            Issue.record(
                "etcd is not installed: the mirror tests need it (run tools/setup, which installs etcd-server)")
            throw EtcdTestError("etcd is not installed")
        }
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("pd-etcd-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let ports = try freePorts(2 * size)
        members = (0..<size).map { Member(name: "m\($0)", clientPort: ports[2 * $0], peerPort: ports[2 * $0 + 1]) }
        client = try EtcdClient(
            endpoints: members.map(\.endpoint), requestTimeout: .seconds(10), connectTimeout: .seconds(1),
            maxBackoff: .milliseconds(200))
        for index in members.indices { try start(index) }
        for index in members.indices { try waitUntilServing(index) }
    }

    deinit {
        for member in members {
            if let process = member.process { Foundation.kill(process.processIdentifier, SIGKILL) }
        }
        for member in members { member.process?.waitUntilExit() }
        try? FileManager.default.removeItem(atPath: directory)
    }

    var endpoints: [String] { lock.withLock { members.map(\.endpoint) } }

    /// Starts (or restarts, with its data) member `index`.
    func start(_ index: Int) throws {
        let member = lock.withLock { members[index] }
        let cluster = lock.withLock {
            members.map { "\($0.name)=http://127.0.0.1:\($0.peerPort)" }.joined(separator: ",")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable!)
        process.arguments = [
            "--name", member.name, "--data-dir", "\(directory)/\(member.name)",
            "--listen-client-urls", member.endpoint, "--advertise-client-urls", member.endpoint,
            "--listen-peer-urls", "http://127.0.0.1:\(member.peerPort)",
            "--initial-advertise-peer-urls", "http://127.0.0.1:\(member.peerPort)",
            "--initial-cluster", cluster, "--initial-cluster-state", "new",
            "--initial-cluster-token", URL(fileURLWithPath: directory).lastPathComponent,
            "--experimental-watch-progress-notify-interval", "1s",
            "--heartbeat-interval", "100", "--election-timeout", "1000",
        ]
        let logPath = "\(directory)/\(member.name).log"
        if !FileManager.default.fileExists(atPath: logPath) {
            guard FileManager.default.createFile(atPath: logPath, contents: nil) else {
                throw EtcdTestError("cannot create \(logPath)")
            }
        }
        guard let log = FileHandle(forWritingAtPath: logPath) else { throw EtcdTestError("cannot open \(logPath)") }
        log.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        try process.run()
        lock.withLock { members[index].process = process }
    }

    /// Kills member `index` with SIGKILL and waits for it to end.
    func kill(_ index: Int) {
        guard let process = lock.withLock({ members[index].process }) else { return }
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        lock.withLock { members[index].process = nil }
    }

    func endpoint(_ index: Int) -> String { lock.withLock { members[index].endpoint } }

    /// Waits until member `index` serves a linearizable read (10 s at most).
    func waitUntilServing(_ index: Int, timeout: Duration = .seconds(10)) throws {
        let single = try EtcdClient(
            endpoints: [endpoint(index)], requestTimeout: timeout, connectTimeout: .seconds(1),
            maxBackoff: .milliseconds(100))
        do {
            _ = try single.range(prefix: Array("/".utf8))
        } catch {
            let log = (try? String(contentsOfFile: "\(directory)/m\(index).log", encoding: .utf8)) ?? ""
            throw EtcdTestError("etcd member \(index) did not serve within \(timeout): \(error)\n\(log.suffix(2000))")
        }
    }

    /// The index of the leader, from `/v3/maintenance/status` of each live member.
    func leader() throws -> Int {
        struct Status: Decodable {
            var header: EtcdHeader
            var leader: String
        }
        for index in lock.withLock({ members.indices }) where lock.withLock({ members[index].process != nil }) {
            let single = try EtcdClient(
                endpoints: [endpoint(index)], requestTimeout: .seconds(5), connectTimeout: .seconds(1),
                maxBackoff: .milliseconds(100))
            let status: Status = try single.call("/v3/maintenance/status", [String: String](), safeToRepeat: true)
            if status.leader == status.header.memberID { return index }
        }
        throw EtcdTestError("no member is the leader")
    }

    // MARK: Writing as an operator would

    func put(_ key: String, _ value: String) throws -> Int64 {
        try client.put(key: Array(key.utf8), value: Array(value.utf8))
    }

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

struct EtcdTestError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Loopback TCP ports that were free a moment ago (bound to port 0, then closed).
func freePorts(_ count: Int) throws -> [Int] {
    var sockets: [Int32] = []
    defer { for socket in sockets { close(socket) } }
    var ports: [Int] = []
    for _ in 0..<count {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw EtcdTestError("socket failed") }
        sockets.append(descriptor)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(descriptor, pointer, length) == 0 && getsockname(descriptor, pointer, &length) == 0
            }
        }
        guard bound else { throw EtcdTestError("bind failed") }
        ports.append(Int(UInt16(bigEndian: address.sin_port)))
    }
    return ports
}

/// Waits until `condition` holds, checking it every 10 ms, for at most `timeout`; records an
/// issue and throws when it never does.
func waitUntil(
    _ what: String, timeout: Duration = .seconds(10), sourceLocation: SourceLocation = #_sourceLocation,
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
