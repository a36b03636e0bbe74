import Foundation

/// etcd members started by a test or a benchmark: on loopback ports chosen at run time, in a
/// temporary data directory, ended by process id (SIGKILL) when the cluster goes. A machine
/// without the `etcd` binary gets an error that says how to install it: the mirror tests fail,
/// never skip. (The operator's writes, through the library's etcd client, are an extension in
/// PersistentDefaultsTests.)
///
/// ```swift
/// let etcd = try EtcdCluster(size: 3)
/// try etcd.etcdctl("put", "/fleet/svc/maxConnections", #"{"type":"int","value":300}"#)
/// etcd.kill(try etcd.leader())
/// ```
public final class EtcdCluster: @unchecked Sendable {
    // @unchecked Sendable: `members` is changed only under `lock`; the rest is set in `init`.
    private struct Member {
        var name: String
        var clientPort: Int
        var peerPort: Int
        var child: ChildProcess?
        var endpoint: String { "http://127.0.0.1:\(clientPort)" }
    }

    /// The `etcd` binary (Debian `etcd-server`), nil when it is not installed.
    public static let executable = ["/usr/bin/etcd", "/usr/local/bin/etcd"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    /// The `etcdctl` binary (Debian `etcd-client`), nil when it is not installed.
    public static let control = ["/usr/bin/etcdctl", "/usr/local/bin/etcdctl"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    /// The directory that holds each member's data directory.
    public let directory: String
    private let lock = NSLock()
    private var members: [Member] = []
    /// `--experimental-watch-progress-notify-interval`: how often an idle watch hears etcd's revision.
    private let progressNotifyInterval: String

    /// Starts `size` members forming one cluster and waits (60 s at most) until each answers.
    /// `progressNotifyInterval` is how often an idle watch is told etcd's revision: 1 s here,
    /// etcd's default `"10m"` for a test about a watch that hears of no revision outside its prefix.
    public init(size: Int = 1, progressNotifyInterval: String = "1s") throws {
        self.progressNotifyInterval = progressNotifyInterval
        guard Self.executable != nil, Self.control != nil else {
            throw EtcdTestError(
                "etcd is not installed: the mirror tests need it (run tools/setup, which installs etcd-server and etcd-client)"
            )
        }
        directory = temporaryPath("pd-etcd")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // A port chosen free can be taken by another process (another test's etcd, an outgoing
        // connection) before the member binds it: then start again on other ports.
        for attempt in 1... {
            let ports = try freePorts(2 * size)
            members = (0..<size).map { Member(name: "m\($0)", clientPort: ports[2 * $0], peerPort: ports[2 * $0 + 1]) }
            do {
                for index in members.indices { try start(index) }
                for index in members.indices { try waitUntilServing(index) }
                return
            } catch let error as EtcdTestError where attempt < 3 && error.description.contains("address already in use")
            {
                for index in members.indices { kill(index) }
                try? FileManager.default.removeItem(atPath: directory)
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            }
        }
    }

    deinit {
        for member in members { member.child?.kill() }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Each member's client URL, `http://127.0.0.1:PORT`.
    public var endpoints: [String] { lock.withLock { members.map(\.endpoint) } }

    /// Starts (or restarts, with its data) member `index`.
    public func start(_ index: Int) throws {
        let member = lock.withLock { members[index] }
        let cluster = lock.withLock {
            members.map { "\($0.name)=http://127.0.0.1:\($0.peerPort)" }.joined(separator: ",")
        }
        let arguments = [
            "--name", member.name, "--data-dir", "\(directory)/\(member.name)",
            "--listen-client-urls", member.endpoint, "--advertise-client-urls", member.endpoint,
            "--listen-peer-urls", "http://127.0.0.1:\(member.peerPort)",
            "--initial-advertise-peer-urls", "http://127.0.0.1:\(member.peerPort)",
            "--initial-cluster", cluster, "--initial-cluster-state", "new",
            "--initial-cluster-token", URL(fileURLWithPath: directory).lastPathComponent,
            "--experimental-watch-progress-notify-interval", progressNotifyInterval,
            "--heartbeat-interval", "100", "--election-timeout", "1000",
        ]
        // Its log is collected in memory; `waitUntilServing` shows its end when the member fails.
        let child = try ChildProcess(URL(fileURLWithPath: Self.executable!), arguments, errors: .merged)
        lock.withLock { members[index].child = child }
    }

    /// Kills member `index` with SIGKILL and waits for it to end.
    public func kill(_ index: Int) {
        lock.withLock { members[index].child }?.kill()
        lock.withLock { members[index].child = nil }
    }

    /// Kills member `index`, removes its data directory and starts it again on the same ports,
    /// then waits until it serves — what an operator does who restarts a member without its data
    /// (or restores an older backup). In a one-member cluster the member keeps its cluster ID
    /// (made from `--initial-cluster` and the token) and its revisions start over at 1.
    public func restartWithoutData(_ index: Int) throws {
        kill(index)
        let name = lock.withLock { members[index].name }
        try FileManager.default.removeItem(atPath: "\(directory)/\(name)")
        try start(index)
        try waitUntilServing(index)
    }

    /// Stops member `index` with SIGSTOP (`true`) or lets it go on with SIGCONT (`false`): a member
    /// that hangs — its connections stay open, it accepts new ones (the kernel completes them and
    /// answers TCP keep-alive) and answers nothing.
    public func setPaused(_ index: Int, _ paused: Bool) {
        if let child = lock.withLock({ members[index].child }) {
            _ = Foundation.kill(child.process.processIdentifier, paused ? SIGSTOP : SIGCONT)
        }
    }

    /// Whether member `index` was started and not killed.
    public func isRunning(_ index: Int) -> Bool { lock.withLock { members[index].child != nil } }

    /// How many members the cluster has.
    public var size: Int { lock.withLock { members.count } }

    /// Member `index`'s client URL.
    public func endpoint(_ index: Int) -> String { lock.withLock { members[index].endpoint } }

    /// Waits until member `index` serves a linearizable read (60 s at most).
    public func waitUntilServing(_ index: Int, timeout: Double = 60) throws {
        let deadline = Date(timeIntervalSinceNow: timeout)
        var last = try etcdctl(member: index, "get", "/")
        while !last.exitedNormally || last.status != 0 {
            let log = lock.withLock { members[index].child?.text } ?? "(not running)"
            // A member that could not bind its port has exited: no need to wait out the time.
            guard Date() < deadline, !log.contains("address already in use") else {
                throw EtcdTestError(
                    "etcd member \(index) did not serve within \(timeout) s: \(last.output)\n\(log.suffix(2000))")
            }
            Thread.sleep(forTimeInterval: 0.05)  // Polling a starting server, not synchronising threads.
            last = try etcdctl(member: index, "get", "/")
        }
    }

    /// Runs `etcdctl` (API v3) against every member, or only member `member`, as an operator
    /// would; its exit status and output.
    @discardableResult
    public func etcdctl(member: Int? = nil, _ arguments: String...) throws -> ProcessResult {
        let endpoints = member.map { [endpoint($0)] } ?? endpoints
        return try runProcess(
            URL(fileURLWithPath: Self.control ?? "etcdctl"),
            ["--endpoints", endpoints.joined(separator: ","), "--dial-timeout", "1s", "--command-timeout", "5s"]
                + arguments,
            environment: ["ETCDCTL_API": "3"])
    }
}

/// A failure to start or reach a test's etcd member.
public struct EtcdTestError: Error, CustomStringConvertible {
    /// What went wrong.
    public var description: String
    /// An error saying `description`.
    public init(_ description: String) { self.description = description }
}

/// Loopback TCP ports that were free a moment ago (bound to port 0, then closed).
public func freePorts(_ count: Int) throws -> [Int] {
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
