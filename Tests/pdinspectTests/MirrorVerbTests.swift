import Foundation
import Testing

/// One etcd member for a test, on a loopback port chosen at run time, ended by process id.
private final class EtcdMember {
    let endpoint: String
    private let process = Process()
    private let directory: String

    init() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/etcd") else {
            Issue.record(
                "etcd is not installed: the mirror tests need it (run tools/setup, which installs etcd-server)")
            throw CocoaError(.fileNoSuchFile)
        }
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("pd-etcd-\(UUID().uuidString)").path
        // Port 0 lets the kernel choose free ports; etcd then binds them a moment later.
        let (client, peer) = try (Self.freePort(), Self.freePort())
        endpoint = "http://127.0.0.1:\(client)"
        process.executableURL = URL(fileURLWithPath: "/usr/bin/etcd")
        process.arguments = [
            "--data-dir", directory, "--listen-client-urls", endpoint, "--advertise-client-urls", endpoint,
            "--listen-peer-urls", "http://127.0.0.1:\(peer)", "--initial-advertise-peer-urls",
            "http://127.0.0.1:\(peer)", "--initial-cluster", "default=http://127.0.0.1:\(peer)",
        ]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let deadline = Date(timeIntervalSinceNow: 10)
        while try etcdctl("get", "/").status != 0 {
            guard Date() < deadline else { throw CocoaError(.fileReadUnknown) }
            Thread.sleep(forTimeInterval: 0.05)  // Polling a starting server, not synchronising threads.
        }
    }

    deinit {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs `etcdctl` (API v3) against this member, as an operator would.
    @discardableResult
    func etcdctl(_ arguments: String...) throws -> (status: Int32, output: String) {
        let tool = Process()
        tool.executableURL = URL(fileURLWithPath: "/usr/bin/etcdctl")
        tool.arguments = ["--endpoints", endpoint, "--dial-timeout", "1s"] + arguments
        tool.environment = ["ETCDCTL_API": "3"]
        let pipe = Pipe()
        tool.standardOutput = pipe
        tool.standardError = pipe
        try tool.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        tool.waitUntilExit()
        return (tool.terminationStatus, String(decoding: output, as: UTF8.self))
    }

    private static func freePort() throws -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
            }
        }
        guard bound else { throw CocoaError(.fileWriteUnknown) }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

@Suite(.serialized)
struct MirrorVerbTests {
    @Test func mirrorFollowsEtcdUntilSIGTERMAndStatShowsIt() throws {
        let etcd = try EtcdMember()
        let store = try TemporaryStore()
        #expect(try etcd.etcdctl("put", "/fleet/svc/maxConnections", #"{"type":"int","value":300}"#).status == 0)
        let tool = try RunningTool(
            [
                "mirror", store.path, "--etcd", etcd.endpoint, "--etcd-prefix", "/fleet/svc/", "--local-prefix",
                "fleet.",
            ],
            errorPipe: true)
        #expect(tool.waitForError(containing: "mirroring etcd /fleet/svc/"))
        #expect(try pdinspect("get", store.path, "fleet.maxConnections").stdout == "300\n")
        #expect(try etcd.etcdctl("put", "/fleet/svc/maxConnections", #"{"type":"int","value":301}"#).status == 0)
        let deadline = Date(timeIntervalSinceNow: 10)
        while try pdinspect("get", store.path, "fleet.maxConnections").stdout != "301\n", Date() < deadline {}
        #expect(try pdinspect("get", store.path, "fleet.maxConnections").stdout == "301\n")
        let refused = try pdinspect("set", store.path, "fleet.maxConnections", "5", "--type", "int")
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("is mirrored from etcd"))
        tool.terminate()
        let outcome = tool.finish()
        #expect(outcome.status == 0)
        #expect(outcome.stderr.contains("stopped at revision"))
        let stat = try pdinspect("stat", store.path)
        #expect(stat.stdout.contains("fleet. ← etcd /fleet/svc/"))
        #expect(stat.stdout.contains("applied revision"))
        let json = try pdinspect("stat", store.path, "--json").json() as? [String: Any]
        let mirrors = json?["mirrors"] as? [[String: Any]]
        #expect(mirrors?.first?["etcdPrefix"] as? String == "/fleet/svc/")
    }

    @Test func mirrorWithNoEtcdFailsWithExitCode3() throws {
        let store = try TemporaryStore()
        let outcome = try pdinspect(
            "mirror", store.path, "--etcd", "http://127.0.0.1:1", "--etcd-prefix", "/f/", "--local-prefix", "f.",
            "--timeout", "1")
        #expect(outcome.status == 3)
        #expect(outcome.stderr.contains("no etcd member answered"))
    }
}
