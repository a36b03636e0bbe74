import Foundation
import PDTestSupport
import Testing

@Suite(.serialized)
struct MirrorVerbTests {
    @Test func mirrorFollowsEtcdUntilSIGTERMAndStatShowsIt() throws {
        let etcd = try EtcdCluster()
        let store = try TemporaryStore()
        #expect(try etcd.etcdctl("put", "/fleet/svc/maxConnections", #"{"type":"int","value":300}"#).status == 0)
        let tool = try RunningTool(
            [
                "mirror", store.path, "--etcd", etcd.endpoint(0), "--etcd-prefix", "/fleet/svc/", "--local-prefix",
                "fleet.",
            ])
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
