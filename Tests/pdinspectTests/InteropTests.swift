import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// Values written by another LMDB client (the Python `lmdb` package) in the documented format:
/// named database `values`, key the UTF-8 name, value a tag byte and the payload.
@Suite(
    "pdinspect interoperability",
    .enabled(if: pythonHasLMDB, "python3 cannot import lmdb (pip install lmdb); interoperability not tested"))
struct InteropTests {
    private static let writer = """
        import lmdb, struct, sys
        env = lmdb.open(sys.argv[1], max_dbs=8, subdir=True)
        values = env.open_db(b"values", create=False)
        with env.begin(write=True) as tx:
            for name, tag, payload in zip(sys.argv[2::3], sys.argv[3::3], sys.argv[4::3]):
                data = struct.pack(">q", int(payload)) if tag == "02" else payload.encode()
                tx.put(name.encode(), bytes([int(tag, 16)]) + data, db=values)
        env.close()
        """

    @Test func pythonValuesShowUpInGetDumpAndCheck() throws {
        let fixture = try TemporaryStore()
        let status = try runPython(Self.writer, [fixture.path, "py.count", "02", "42", "py.name", "05", "snake"])
        #expect(status == 0)
        #expect(try pdinspect("get", fixture.path, "py.count").stdout == "42\n")
        let json = try #require(try pdinspect("get", fixture.path, "py.name", "--json").json() as? [String: Any])
        #expect(json["type"] as? String == "string")
        #expect(json["value"] as? String == "snake")
        let dump = try pdinspect("dump", fixture.path)
        #expect(dump.stdout.contains("py.count        int     42\n"))
        let check = try pdinspect("check", fixture.path)
        #expect(check.status == 0, "\(check)")
        #expect(check.stdout.hasPrefix("ok: 9 keys"))
    }

    @Test func undecodableValueFailsCheckAndGet() throws {
        let fixture = try TemporaryStore()
        let status = try runPython(Self.writer, [fixture.path, "py.bad", "7f", "junk"])
        #expect(status == 0)
        let check = try pdinspect("check", fixture.path)
        #expect(check.status == 1)
        #expect(check.stdout.contains("value of \"py.bad\": unknown type tag 0x7f"))
        #expect(check.stderr == "pdinspect: check found 1 problem\n")
        let get = try pdinspect("get", fixture.path, "py.bad")
        #expect(get.status == 3)
        #expect(get.isOneErrorLine)
        let dump = try pdinspect("dump", fixture.path)
        #expect(dump.status == 0)
        #expect(dump.stdout.contains("py.bad          invalid  (unknown type tag 0x7f)"))
        let keys = try pdinspect("keys", fixture.path)
        #expect(keys.stdout.contains("py.bad          invalid"))
    }

    @Test(arguments: ["ffffffffffffffff", "8000000000000000", "010203"])
    func aForeignLogKeyFailsLogAndCheckWithOneLine(hexKey: String) throws {
        let fixture = try TemporaryStore()
        let script = """
            import lmdb, sys
            env = lmdb.open(sys.argv[1], max_dbs=8, subdir=True)
            log = env.open_db(b"log", create=False)
            with env.begin(write=True) as tx:
                tx.put(bytes.fromhex(sys.argv[2]), b"foreign", db=log)
            env.close()
            """
        #expect(try runPython(script, [fixture.path, hexKey]) == 0)
        let log = try pdinspect("log", fixture.path)
        #expect(log.status == 3, "\(log)")
        #expect(log.isOneErrorLine, "\(log)")
        #expect(log.stderr.contains("log key"), "\(log)")
        let check = try pdinspect("check", fixture.path)
        #expect(check.status == 1, "\(check)")
        #expect(check.stderr == "pdinspect: check found 1 problem\n", "\(check)")
        #expect(check.stdout.contains("log key"), "\(check)")
        let set = try pdinspect("set", fixture.path, "launchCount", "4", "--type", "int")
        #expect(set.status == 3, "\(set)")
        #expect(set.isOneErrorLine, "\(set)")
        #expect(try pdinspect("get", fixture.path, "launchCount").stdout == "3\n")
        #expect(try pdinspect("stat", fixture.path).status == 0)
    }
}
