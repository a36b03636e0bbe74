import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

@testable import PDInspectCore

/// A damaged or missing store, made from a good one.
enum Damage: String, CaseIterable, Sendable {
    case missingPath, emptyDirectory, emptyDataFile, truncatedDataFile, metaPagesOnly, randomBytes, fileNotDirectory
    /// The newest commit's main-database root page holds what a power cut left there: bytes
    /// never written (the power-cut disk's fill pattern). Its header claims ~26,000 entries, and
    /// LMDB's lookup of a database name read past the file: `pdinspect` crashed (SIGSEGV in
    /// `mdb_dbi_open`) on 1 of 200 `.bounded` power-cut stores before that lookup was guarded.
    case mainRootUnwritten

    /// The message part that names the problem.
    var message: String {
        switch self {
        case .missingPath: "no such directory"
        case .emptyDirectory: "the directory has no data.mdb"
        case .emptyDataFile: "data.mdb is empty"
        case .truncatedDataFile, .metaPagesOnly: "data.mdb is truncated"
        case .randomBytes: "data.mdb is not an LMDB file"
        case .fileNotDirectory: "not a directory"
        case .mainRootUnwritten: "a page of the store is damaged"
        }
    }

    /// Damages the fixture's store (or points elsewhere); returns the path to give pdinspect.
    func apply(to fixture: TemporaryStore) throws -> String {
        let data = fixture.path + "/data.mdb"
        let bytes = fixture.dataBytes
        switch self {
        case .missingPath:
            return fixture.scratch("missing")
        case .emptyDirectory:
            let path = fixture.scratch("empty")
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            return path
        case .emptyDataFile:
            try Data().write(to: URL(fileURLWithPath: data))
        case .truncatedDataFile:
            try bytes.prefix(100).write(to: URL(fileURLWithPath: data))
        case .metaPagesOnly:
            try bytes.prefix(2 * 4096).write(to: URL(fileURLWithPath: data))
        case .randomBytes:
            try Data((0..<65_536).map { _ in UInt8.random(in: 0...255) }).write(to: URL(fileURLWithPath: data))
        case .fileNotDirectory:
            return data
        case .mainRootUnwritten:
            try overwriteMainDatabaseRoot(ofDataFile: data)
        }
        return fixture.path
    }
}

/// Bad input of every kind: one clear line on stderr, the documented exit code, no crash,
/// and the data file's bytes unchanged.
@Suite("pdinspect bad input")
struct BadInputTests {
    static let verbs: [[String]] = [
        ["get", "k"], ["keys"], ["dump", "--json"], ["stat"], ["log"], ["check"], ["readers"],
        ["set", "k", "1", "--type", "int"],
        ["delete", "k"],
    ]

    @Test(arguments: Damage.allCases)
    func damagedStoreIsRefused(_ damage: Damage) throws {
        let fixture = try TemporaryStore()
        let path = try damage.apply(to: fixture)
        let before = fixture.dataBytes
        for verb in Self.verbs {
            let outcome = try pdinspect(arguments: [verb[0], path] + verb.dropFirst())
            #expect(outcome.status == 3, "\(verb): \(outcome)")
            #expect(outcome.isOneErrorLine, "\(verb): \(outcome)")
            #expect(outcome.stderr.contains(damage.message), "\(verb): \(outcome)")
            #expect(outcome.stdout.isEmpty)
        }
        #expect(fixture.dataBytes == before)
        if damage == .missingPath { #expect(!FileManager.default.fileExists(atPath: path), "no store was created") }
        if damage == .emptyDirectory {
            #expect(try FileManager.default.contentsOfDirectory(atPath: path).isEmpty, "no store was created")
        }
    }

    @Test(.enabled(if: canRunAsNobody, "needs root and setpriv to run pdinspect as nobody; root reads any file"))
    func unreadableDataFileIsRefused() throws {
        let fixture = try TemporaryStore()
        // The store directory is 0700 and data.mdb 0600, both root's: let nobody reach the file only.
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: fixture.directory)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: fixture.path)
        let before = fixture.dataBytes
        for verb in [["get", "theme"], ["keys"], ["set", "theme", "x", "--type", "string"]] {
            let outcome = try RunningTool([verb[0], fixture.path] + verb.dropFirst(), asNobody: true).finish()
            #expect(outcome.status == 3, "\(outcome)")
            #expect(outcome.isOneErrorLine, "\(outcome)")
            #expect(outcome.stderr.contains("data.mdb failed: Permission denied"), "\(outcome)")
        }
        #expect(fixture.dataBytes == before)
    }

    /// A `meta` database holding `format-version` = 0 (`00 00 00 00`), a version that never
    /// existed: every verb, `check` included, refused nothing before (exit 0).
    @Test func formatVersionZeroIsRefused() throws {
        let fixture = try TemporaryStore()
        try rawLMDBPut(
            fixture.path, [RawLMDBEntry(database: "meta", key: Array("format-version".utf8), value: [0, 0, 0, 0])])
        let before = fixture.dataBytes
        for verb in Self.verbs {
            let outcome = try pdinspect(arguments: [verb[0], fixture.path] + verb.dropFirst())
            #expect(outcome.status == 3, "\(verb): \(outcome)")
            #expect(outcome.isOneErrorLine, "\(verb): \(outcome)")
            #expect(outcome.stderr.contains("the format version is 0"), "\(verb): \(outcome)")
            #expect(outcome.stdout.isEmpty, "\(verb): \(outcome)")
        }
        #expect(fixture.dataBytes == before)
    }

    /// A log key that is no sequence number: `watch` printed the error twice, once through the
    /// library's error handler ("PersistentDefaults: …", when its observer registered) and once
    /// as its own line. Now one line and exit 3, like `log`.
    @Test(arguments: ["ffffffffffffffff", "010203"])
    func followingAMalformedLogKeyPrintsOneLine(hexKey: String) throws {
        let fixture = try TemporaryStore()
        let key = stride(from: 0, to: hexKey.count, by: 2).map {
            UInt8(hexKey.dropFirst($0).prefix(2), radix: 16)!
        }
        try rawLMDBPut(fixture.path, [RawLMDBEntry(database: "log", key: key, value: Array("foreign".utf8))])
        for verb in [["watch", "--since", "0"], ["log", "--follow"]] {
            let arguments = [verb[0], fixture.path] + verb.dropFirst() + ["--json", "--timeout", "10"]
            let outcome = try pdinspect(arguments: arguments)
            #expect(outcome.status == 3, "\(verb): \(outcome)")
            #expect(outcome.isOneErrorLine, "\(verb): \(outcome)")
            #expect(outcome.stderr.contains("is malformed"), "\(verb): \(outcome)")
        }
    }

    /// A malformed record committed while `watch` runs: the library's observer skipped it and
    /// reported it on standard error ("PersistentDefaults: …"), and `watch` went on to exit 0
    /// at its time limit. Now it prints the records delivered before, then one line, exit 3.
    @Test func watchEndsOnAMalformedRecordCommittedWhileItRuns() throws {
        let fixture = try TemporaryStore()
        let start = try fixture.open().lastSequence()
        let watcher = try RunningTool(["watch", fixture.path, "--since", "\(start)", "--json", "--timeout", "10"])
        defer { watcher.terminate() }
        // Another process commits; once it is printed, the watcher's observer is registered.
        #expect(try runFixture(["set-int", fixture.path, "launchCount", "4"]).status == 0)
        #expect(watcher.child.wait(for: #""value":4"#))
        // Another LMDB client appends a malformed record, then a commit wakes the watcher.
        var sequence = (start + 2).bigEndian
        let key = withUnsafeBytes(of: &sequence) { Array($0) }
        try rawLMDBPut(fixture.path, [RawLMDBEntry(database: "log", key: key, value: [0x01, 0x67])])
        #expect(try runFixture(["set-int", fixture.path, "launchCount", "5"]).status == 0)
        let outcome = watcher.finish()
        #expect(outcome.status == 3, "\(outcome)")
        #expect(outcome.isOneErrorLine, "\(outcome)")
        #expect(outcome.stderr.contains("commit log record \(start + 2) is malformed"), "\(outcome)")
        #expect(outcome.stdout.contains(#""value":4"#), "\(outcome)")
    }

    /// A forged commit record's time outside the calendar was printed by `log`, `watch` and
    /// `describe` as a wrong date; it is shown as its seconds, like a date value.
    @Test func commitTimesOutsideTheCalendarAreShownAsSeconds() {
        #expect(TextTable.timestamp(Date(timeIntervalSince1970: 1_800_000_000.5)) == "2027-01-15T08:00:00.500Z")
        #expect(
            TextTable.timestamp(Date(timeIntervalSince1970: -1e12))
                == "-1000000000000.0 seconds since 1970 (not shown as a date: outside 1582-10-15…9999-12-31)")
    }

    @Test func badValuesAndKeyNamesAreUsageErrors() throws {
        let fixture = try TemporaryStore()
        let before = fixture.dataBytes
        let cases: [[String]] = [
            ["set", fixture.path, "launchCount", "three", "--type", "int"],
            ["set", fixture.path, "launchCount", "1.5", "--type", "int"],
            ["set", fixture.path, "flag", "maybe", "--type", "bool"],
            ["set", fixture.path, "at", "tomorrow", "--type", "date"],
            ["set", fixture.path, "blob", "xyz", "--type", "data"],
            ["set", fixture.path, "cfg", "{not json", "--type", "json"],
            ["set", fixture.path, String(repeating: "n", count: 600), "1", "--type", "int"],
            ["get", fixture.path, String(repeating: "n", count: 600)],
            ["delete", fixture.path, ""],
        ]
        for arguments in cases {
            let outcome = try pdinspect(arguments: arguments)
            #expect(outcome.status == 2, "\(outcome)")
            #expect(outcome.isOneErrorLine, "\(outcome)")
        }
        #expect(fixture.dataBytes == before)
        let lastSequence = try fixture.open().lastSequence()
        #expect(lastSequence == 2)
    }

    /// A --timeout too long for the follow loop's and the mirror's integer waits trapped (exit 132,
    /// a stack on stderr): 1e10 seconds overflows `Int` nanoseconds, 1e300 the `Duration`.
    @Test func hugeTimeoutsAreUsageErrors() throws {
        let fixture = try TemporaryStore()
        let before = fixture.dataBytes
        let cases: [[String]] = [
            ["watch", fixture.path, "--timeout", "1e10"],
            ["watch", fixture.path, "--timeout", "1e300"],
            ["log", fixture.path, "--follow", "--timeout", "1e10"],
            ["log", fixture.path, "--follow", "--timeout", "1e300"],
            [
                "mirror", fixture.path, "--etcd", "http://127.0.0.1:1", "--etcd-prefix", "/f/", "--local-prefix", "f.",
                "--timeout", "1e300",
            ],
        ]
        for arguments in cases {
            let outcome = try pdinspect(arguments: arguments)
            #expect(outcome.status == 2, "\(arguments): \(outcome)")
            #expect(outcome.isOneErrorLine, "\(arguments): \(outcome)")
            #expect(outcome.stderr.contains("--timeout needs a number of seconds"), "\(arguments): \(outcome)")
        }
        #expect(fixture.dataBytes == before)
    }

    /// The same timeouts given through the API (a `Command` the parser never saw) are bounded
    /// where they are used: the follow stops at its event, no trap.
    @Test func hugeTimeoutsThroughTheAPIAreBounded() throws {
        let fixture = try TemporaryStore()
        try PersistentDefaults(path: fixture.path)[PersistentDefaults.Key<Int>("k", default: 0)] = 1
        for timeout in [1e10, 1e300, .infinity, .nan] {
            let lines = CollectedLines()
            let console = Console(output: { lines.append($0) }, error: { lines.append($0) })
            let follow = FollowOptions(since: 0, maxEvents: 1, timeout: timeout)
            let code = Runner(console: console).run(
                .watch(database: fixture.path, keys: [], follow: follow, format: .json))
            #expect(code == .success, "\(timeout): \(lines.all)")
            #expect(lines.all.count == 1, "\(timeout): \(lines.all)")
        }
    }

    /// export writes a temporary file and renames it onto FILE: given the store's own data.mdb it
    /// replaced the store with its JSON (exit 0, every later open "not an LMDB file"), and given a
    /// FIFO or a device node (`/dev/full`) it replaced the node with a regular file.
    @Test func exportNeverReplacesTheStoreOrANonRegularFile() throws {
        let fixture = try TemporaryStore()
        let before = fixture.dataBytes
        let fifo = fixture.scratch("fifo")
        #expect(mkfifo(fifo, 0o600) == 0)
        for target in [fixture.path + "/data.mdb", fixture.path + "/lock.mdb", fifo, fixture.directory] {
            let outcome = try pdinspect("export", fixture.path, target)
            #expect(outcome.status == 2, "\(target): \(outcome)")
            #expect(outcome.isOneErrorLine, "\(target): \(outcome)")
            #expect(outcome.stderr.contains("nothing was written"), "\(target): \(outcome)")
        }
        #expect(fixture.dataBytes == before)
        let attributes = try FileManager.default.attributesOfItem(atPath: fifo)
        #expect(attributes[.type] as? FileAttributeType != .typeRegular, "the FIFO was replaced")
        #expect(try pdinspect("get", fixture.path, "theme").stdout == "dark\n")
        // An earlier export file is replaced, as before.
        let file = fixture.scratch("e.json")
        try Data("old".utf8).write(to: URL(fileURLWithPath: file))
        #expect(try pdinspect("export", fixture.path, file).status == 0)
        #expect(
            FileManager.default.contents(atPath: file).map { String(decoding: $0, as: UTF8.self) }?.contains(
                "pdinspect-export") == true)
    }

    /// An argument that is not UTF-8 (a shell's `$'k\\xff'`) was repaired into U+FFFD by
    /// `CommandLine.arguments`: `set` stored a key of another name and exited 0, `get` of
    /// another such name read it, and `compact` and `export` wrote to other paths.
    @Test func argumentsThatAreNotUTF8AreUsageErrors() throws {
        let fixture = try TemporaryStore()
        let before = fixture.dataBytes
        let cases = [
            #"set "$1" "$(printf 'k\377')" 5 --type int"#,
            #"get "$1" "$(printf 'theme\377')""#,
            #"compact "$1" "$2/$(printf 'out\377')""#,
            #"export "$1" "$2/$(printf 'e\377.json')""#,
        ]
        for command in cases {
            // Foundation's Process takes Strings: the shell makes the bytes.
            let child = try ChildProcess(
                URL(fileURLWithPath: "/bin/sh"),
                ["-c", #"exec "$0" "# + command, Products.pdinspect.path, fixture.path, fixture.directory],
                errors: .separate)
            #expect(child.waitForExit(timeout: 30))
            #expect(child.waitForOutputEnd())
            let outcome = Outcome(status: child.process.terminationStatus, stdout: child.text, stderr: child.errorText)
            #expect(outcome.status == 2, "\(command): \(outcome)")
            #expect(outcome.isOneErrorLine, "\(command): \(outcome)")
            #expect(outcome.stderr.contains("is not valid UTF-8"), "\(command): \(outcome)")
        }
        #expect(fixture.dataBytes == before)
        #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.directory) == ["store"])
    }

    /// A compact whose copy fails (here: a file-size limit, as a full disk) left the OUT
    /// directory it had created, empty, behind.
    ///
    /// Not under ThreadSanitizer: its runtime faults (SIGBUS in its own shadow memory, in
    /// `memcpy` at the store's open) in a process limited to so few file blocks; `tools/test`
    /// runs it.
    @Test(.disabled(if: Products.areThreadSanitized, "ThreadSanitizer's runtime faults under ulimit -f 8"))
    func aFailedCompactLeavesNoDirectory() throws {
        let fixture = try TemporaryStore()
        let out = fixture.scratch("out")
        // Ignored, SIGXFSZ stays ignored across exec: a write over the limit fails with EFBIG.
        let child = try ChildProcess(
            URL(fileURLWithPath: "/bin/sh"),
            [
                "-c", #"trap "" XFSZ; ulimit -f 8; exec "$0" compact "$1" "$2""#, Products.pdinspect.path, fixture.path,
                out,
            ],
            errors: .separate)
        #expect(child.waitForExit(timeout: 30))
        #expect(child.waitForOutputEnd())
        #expect(child.process.terminationStatus == 3, "\(child.errorText)")
        #expect(child.errorText.contains("File too large"), "\(child.errorText)")
        #expect(!FileManager.default.fileExists(atPath: out), "the failed compact left \(out)")
    }

    static let malformedImports: [(name: String, text: String, message: String)] = [
        ("empty", "", "not valid JSON"),
        ("not JSON", "keys: 1", "not valid JSON"),
        ("wrong format", #"{"format":"plist","version":1,"keys":{}}"#, "expected \"pdinspect-export\""),
        ("newer version", #"{"format":"pdinspect-export","version":2,"keys":{}}"#, "version 2 is not supported"),
        ("no keys", #"{"format":"pdinspect-export","version":1}"#, "\"keys\" is missing"),
        (
            "unknown type", #"{"format":"pdinspect-export","version":1,"keys":{"a":{"type":"integer","value":1}}}"#,
            "unknown type 'integer'"
        ),
        (
            "value of the wrong type",
            #"{"format":"pdinspect-export","version":1,"keys":{"a":{"type":"int","value":1},"b":{"type":"int","value":"x"}}}"#,
            "at keys.b.value"
        ),
        (
            "bad base64", #"{"format":"pdinspect-export","version":1,"keys":{"a":{"type":"data","value":"%%"}}}"#,
            "not base64 data"
        ),
        (
            "empty key name", #"{"format":"pdinspect-export","version":1,"keys":{"":{"type":"int","value":1}}}"#,
            "must not be empty"
        ),
    ]

    /// Two keys whose names are not UTF-8 (`bad` then 0xff, and 0xfe; another LMDB client wrote
    /// them): `export` and `dump --json` wrote both as the repaired name "bad\u{FFFD}", one JSON
    /// member, so one value was lost in silence (9 keys stored, 8 exported, exit 0) and `import`
    /// stored the other under a third name.
    @Test func namesThatAreNotUTF8AreNotTakenForTheirRepairedForm() throws {
        let fixture = try TemporaryStore()
        try rawLMDBPut(
            fixture.path,
            [0xff, 0xfe].map {
                RawLMDBEntry(database: "values", key: Array("bad".utf8) + [$0], value: StoredValue.int(5).encodedValue)
            })
        let before = fixture.dataBytes
        let file = fixture.scratch("export.json")
        let export = try pdinspect("export", fixture.path, file)
        #expect(export.status == 3, "\(export)")
        #expect(export.isOneErrorLine, "\(export)")
        #expect(export.stderr.contains("is not valid UTF-8"), "\(export)")
        #expect(!FileManager.default.fileExists(atPath: file))
        let dump = try pdinspect("dump", fixture.path, "--json")
        #expect(dump.status == 0, "\(dump)")
        let keys = try #require((try dump.json() as? [String: Any])?["keys"] as? [String: Any])
        #expect(keys.count == 7, "\(dump)")
        #expect(dump.stderr.split(separator: "\n").filter { $0.contains("is not valid UTF-8") }.count == 2, "\(dump)")
        #expect(fixture.dataBytes == before)
    }

    /// `import --replace` into a store holding a key whose name is not UTF-8 (`bad` + 0xff):
    /// the stale keys were found by their repaired names, so that key stayed while the output
    /// counted it ("removed 8", exit 0; 7 were removed), against "also remove the keys that FILE
    /// does not list". Such a store is refused now, as by `export`: exit 3, nothing changed.
    @Test func importReplaceRefusesAStoreWithANameThatIsNotUTF8() throws {
        let fixture = try TemporaryStore()
        try rawLMDBPut(
            fixture.path,
            [RawLMDBEntry(database: "values", key: Array("bad".utf8) + [0xff], value: StoredValue.int(5).encodedValue)])
        let file = fixture.scratch("import.json")
        try Data(#"{"format":"pdinspect-export","version":1,"keys":{"n":{"type":"int","value":1}}}"#.utf8)
            .write(to: URL(fileURLWithPath: file))
        let before = fixture.dataBytes
        let outcome = try pdinspect("import", fixture.path, file, "--replace")
        #expect(outcome.status == 3, "\(outcome)")
        #expect(outcome.isOneErrorLine, "\(outcome)")
        #expect(outcome.stderr.contains("not valid UTF-8"), "\(outcome)")
        #expect(fixture.dataBytes == before)
        #expect(try fixture.open().storedEntries().count == 8)
    }

    @Test func malformedImportChangesNothing() throws {
        let fixture = try TemporaryStore()
        let before = fixture.dataBytes
        for item in Self.malformedImports {
            let file = fixture.scratch("import.json")
            try Data(item.text.utf8).write(to: URL(fileURLWithPath: file))
            let outcome = try pdinspect("import", fixture.path, file)
            #expect(outcome.status == 2, "\(item.name): \(outcome)")
            #expect(outcome.isOneErrorLine, "\(item.name): \(outcome)")
            #expect(outcome.stderr.contains(item.message), "\(item.name): \(outcome)")
        }
        let missing = try pdinspect("import", fixture.path, fixture.scratch("nope.json"))
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("no such file"))
        #expect(fixture.dataBytes == before)
    }
}
