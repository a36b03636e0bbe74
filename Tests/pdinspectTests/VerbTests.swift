import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Every verb, run as the built binary against a real store.
@Suite("pdinspect verbs")
struct VerbTests {
    @Test func helpDescribesEveryVerbAndTheExitCodes() throws {
        let overview = try pdinspect("--help")
        #expect(overview.status == 0)
        for verb in [
            "keys", "get", "describe", "set", "delete", "dump", "export", "import", "stat", "log", "watch", "check",
            "compact", "readers",
        ] {
            #expect(overview.stdout.contains("\n  \(verb) DB"), "\(verb) missing from --help")
        }
        #expect(overview.stdout.contains("3  the database cannot be opened"))
        let verbHelp = try pdinspect("log", "--help")
        #expect(verbHelp.status == 0)
        #expect(verbHelp.stdout.contains("--follow"))
        let none = try pdinspect()
        #expect(none.status == 2)
        #expect(none.stderr.contains("usage: pdinspect VERB"))
    }

    @Test func unknownVerbAndOptionGetAHint() throws {
        let verb = try pdinspect("dupm", "db")
        #expect(verb.status == 2)
        #expect(verb.isOneErrorLine)
        #expect(verb.stderr.contains("did you mean 'dump'?"))
        let option = try pdinspect("keys", "db", "--jsn")
        #expect(option.status == 2)
        #expect(option.stderr.contains("did you mean '--json'?"))
    }

    @Test func keysListsNameTypeAndSize() throws {
        let fixture = try TemporaryStore()
        let human = try pdinspect("keys", fixture.path)
        #expect(human.status == 0)
        #expect(human.stdout.contains("launchCount     int     9\n"))
        let json = try pdinspect("keys", fixture.path, "--prefix", "window.", "--json")
        let rows = try #require(try json.json() as? [[String: Any]])
        #expect(rows.map { $0["name"] as? String } == ["window.frame", "window.visible"])
        #expect(rows.map { $0["type"] as? String } == ["json", "bool"])
        #expect(rows.last?["size"] as? Int == 2)
    }

    @Test func getPrintsTheDecodedValue() throws {
        let fixture = try TemporaryStore()
        #expect(try pdinspect("get", fixture.path, "theme").stdout == "dark\n")
        #expect(try pdinspect("get", fixture.path, "launchCount").stdout == "3\n")
        #expect(try pdinspect("get", fixture.path, "blob").stdout == "<0a1b>\n")
        let json = try #require(try pdinspect("get", fixture.path, "window.frame", "--json").json() as? [String: Any])
        #expect(json["name"] as? String == "window.frame")
        #expect(json["type"] as? String == "json")
        #expect((json["value"] as? [String: Any])?["x"] as? Int == 10)
        let absent = try pdinspect("get", fixture.path, "nothing")
        #expect(absent.status == 1)
        #expect(absent.stdout.isEmpty)
        #expect(absent.stderr == "pdinspect: key \"nothing\" is absent\n")
    }

    /// A date far outside the calendar (1e300 seconds, infinity, NaN) was printed as a wrong
    /// date (506713-02-07T00:00:00Z, -4712-01-01T12:00:00Z) by every human-readable form.
    @Test func datesOutsideTheCalendarAreShownAsSeconds() throws {
        let fixture = try TemporaryStore()
        let store = try fixture.open()
        let start = try store.lastSequence()
        let dates: [(name: String, seconds: Double, text: String)] = [
            ("far", 1e300, "1e+300"), ("nan", .nan, "nan"), ("inf", .infinity, "inf"), ("past", -1e300, "-1e+300"),
        ]
        try store.write { tx in
            for date in dates {
                try tx.setStoredValue(.date(Date(timeIntervalSinceReferenceDate: date.seconds)), named: date.name)
            }
        }
        let note = " seconds since 1970 (not shown as a date: outside 1582-10-15…9999-12-31)"
        let dump = try pdinspect("dump", fixture.path).stdout
        let log = try pdinspect("log", fixture.path, "--since", "\(start)").stdout
        let watch = try pdinspect("watch", fixture.path, "--since", "\(start)", "--max-events", "4").stdout
        for date in dates {
            #expect(try pdinspect("get", fixture.path, date.name).stdout == date.text + note + "\n")
            #expect(try pdinspect("describe", fixture.path, date.name).stdout.contains(date.text + note))
            #expect(dump.contains(date.text + note), "\(dump)")
            #expect(log.contains(date.text + note), "\(log)")
            #expect(watch.contains(date.text + note), "\(watch)")
        }
        // Inside the range, ISO 8601 as before.
        #expect(try pdinspect("get", fixture.path, "when").stdout == "2027-01-15T08:00:00Z\n")
    }

    @Test func setWritesThroughTheLibraryAndIsLogged() throws {
        let fixture = try TemporaryStore()
        let before = try fixture.open().lastSequence()
        let cases: [(type: String, text: String, value: StoredValue)] = [
            ("int", "-42", .int(-42)), ("bool", "false", .bool(false)), ("double", "2.5", .double(2.5)),
            ("string", "hello world", .string("hello world")),
            ("date", "1800000000", .date(Date(timeIntervalSince1970: 1_800_000_000))),
            ("data", "00ff", .data(Data([0, 255]))), ("json", "[1, 2]", .json("[1,2]")),
        ]
        for (index, item) in cases.enumerated() {
            let outcome = try pdinspect("set", fixture.path, "k\(index)", item.text, "--type", item.type)
            #expect(outcome.status == 0, "\(outcome)")
        }
        let store = try fixture.open()
        for (index, item) in cases.enumerated() {
            #expect(try store.storedValue(named: "k\(index)") == item.value)
        }
        let records = try store.commits(after: before)
        #expect(records.map(\.changedKeys) == cases.indices.map { ["k\($0)"] })
        #expect(records.allSatisfy { $0.processID != getpid() })
    }

    @Test func deleteRemovesAndReportsAbsence() throws {
        let fixture = try TemporaryStore()
        #expect(try pdinspect("delete", fixture.path, "theme").status == 0)
        #expect(try fixture.open().storedValue(named: "theme") == nil)
        let again = try pdinspect("delete", fixture.path, "theme")
        #expect(again.status == 1)
        #expect(again.stderr.contains("absent"))
    }

    /// A key or value `-h` or `--help` after `--`: every verb printed its help and exited 0, so
    /// `set` reported success and wrote nothing, and such a key could not be read or removed.
    @Test func helpWordsAfterDoubleDashAreKeysAndValues() throws {
        let fixture = try TemporaryStore()
        let set = try pdinspect("set", fixture.path, "--type", "string", "--", "-h", "--help")
        #expect(set.status == 0, "\(set)")
        #expect(set.stdout.isEmpty, "\(set)")
        #expect(try fixture.open().storedValue(named: "-h") == .string("--help"))
        let get = try pdinspect("get", fixture.path, "--", "-h")
        #expect(get.stdout == "--help\n", "\(get)")
        let keys = try pdinspect("keys", fixture.path, "--prefix", "-h")
        #expect(keys.stdout.hasPrefix("NAME"), "\(keys)")
        #expect(try pdinspect("delete", fixture.path, "--", "-h").status == 0)
        #expect(try fixture.open().storedValue(named: "-h") == nil)
    }

    @Test func dumpShowsEveryKey() throws {
        let fixture = try TemporaryStore()
        let human = try pdinspect("dump", fixture.path)
        #expect(human.status == 0)
        #expect(human.stdout.contains("theme           string  dark\n"))
        #expect(human.stdout.contains("when            date    2027-01-15T08:00:00Z\n"))
        let document = try #require(try pdinspect("dump", fixture.path, "--json").json() as? [String: Any])
        let keys = try #require(document["keys"] as? [String: [String: Any]])
        #expect(keys.count == 7)
        #expect(keys["ratio"]?["value"] as? Double == 0.75)
        #expect(keys["blob"]?["value"] as? String == "Chs=")
    }

    @Test func exportThenImportRoundTripsEveryType() throws {
        let source = try TemporaryStore()
        try source.open().setStoredValue(.uint(.max), named: "big")
        try source.open().setStoredValue(.int(.min), named: "small")
        let file = source.scratch("export.json")
        let exported = try pdinspect("export", source.path, file)
        #expect(exported.status == 0, "\(exported)")
        let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let target = try TemporaryStore(seeded: false)
        try target.open().setStoredValue(.string("gone"), named: "stale")
        let imported = try pdinspect("import", target.path, file, "--replace")
        #expect(imported.status == 0, "\(imported)")
        #expect(imported.stdout == "imported 9 keys, removed 1\n")
        let sourceEntries = try source.open().storedEntries()
        #expect(try target.open().storedEntries() == sourceEntries)
        let records = try target.open().commits(after: 1)
        #expect(records.count == 1, "one transaction")
        let stdin = try pdinspect("import", target.path, "-", stdin: try String(contentsOfFile: file, encoding: .utf8))
        #expect(stdin.status == 0)
    }

    @Test func statReportsFormatAndSizes() throws {
        let fixture = try TemporaryStore()
        let human = try pdinspect("stat", fixture.path)
        #expect(human.status == 0)
        for label in [
            "format version", "entries", "map size", "page size", "tree depth", "readers", "log range", "data.mdb",
        ] {
            #expect(human.stdout.contains(label))
        }
        let json = try #require(try pdinspect("stat", fixture.path, "--json").json() as? [String: Any])
        #expect(json["formatVersion"] as? Int == 1)
        #expect(json["keys"] as? Int == 7)
        #expect(json["lastLogSequence"] as? Int == 2)
    }

    @Test func logListsCommits() throws {
        let fixture = try TemporaryStore()
        let human = try pdinspect("log", fixture.path)
        #expect(human.stdout.hasPrefix("#1  "))
        #expect(human.stdout.contains("    launchCount  int  3\n"))
        let all = try #require(try pdinspect("log", fixture.path, "--json").json() as? [[String: Any]])
        #expect(all.map { $0["sequence"] as? Int } == [1, 2])
        let newest = try #require(
            try pdinspect("log", fixture.path, "--limit", "1", "--json").json() as? [[String: Any]])
        #expect(newest.map { $0["sequence"] as? Int } == [2])
        let after = try #require(
            try pdinspect("log", fixture.path, "--since", "1", "--json").json() as? [[String: Any]])
        let changes = try #require(after.first?["changes"] as? [[String: Any]])
        #expect(changes.count == 6)
    }

    @Test func logFollowPrintsNewCommits() throws {
        let fixture = try TemporaryStore()
        let follower = try RunningTool(["log", fixture.path, "--follow", "--json", "--max-events", "3"])
        try fixture.open().setStoredValue(.int(7), named: "launchCount")
        let outcome = follower.finish()
        #expect(outcome.status == 0, "\(outcome)")
        let lines = try outcome.jsonLines()
        #expect(lines.map { $0["sequence"] as? Int } == [1, 2, 3])
    }

    @Test func watchPrintsChangesOfTheNamedKeys() throws {
        let fixture = try TemporaryStore()
        let store = try fixture.open()
        let start = try store.lastSequence()
        let watcher = try RunningTool([
            "watch", fixture.path, "theme", "--since", "\(start)", "--json", "--max-events", "2",
        ])
        try store.setStoredValue(.int(8), named: "launchCount")
        try store.setStoredValue(.string("light"), named: "theme")
        try store.removeValue(named: "theme")
        let outcome = watcher.finish()
        #expect(outcome.status == 0, "\(outcome)")
        let events = try outcome.jsonLines()
        #expect(events.count == 2)
        #expect(events.first?["key"] as? String == "theme")
        #expect(events.first?["value"] as? String == "light")
        #expect(events.last?["removed"] as? Bool == true)
        let human = try RunningTool(["watch", fixture.path, "--since", "0", "--max-events", "1"]).finish()
        #expect(human.stdout.contains("launchCount  int  3"))
        let timedOut = try RunningTool(["watch", fixture.path, "--timeout", "0.2"]).finish()
        #expect(timedOut.status == 0)
        #expect(timedOut.stdout.isEmpty)
    }

    @Test func watchWithAPrefixPrintsOnlyTheKeysUnderIt() throws {
        let fixture = try TemporaryStore()
        let store = try fixture.open()
        try store.setStoredValue(.int(1), named: "fleet.old")  // in the log before the watch starts
        let start = try store.lastSequence() - 1
        let watcher = try RunningTool([
            "watch", fixture.path, "--prefix", "fleet.", "--since", "\(start)", "--json", "--max-events", "3",
        ])
        try store.setStoredValue(.int(8), named: "launchCount")
        try store.write { tx in
            try tx.setStoredValue(.int(2), named: "fleet.a")
            try tx.setStoredValue(.int(9), named: "other")
        }
        try store.setStoredValue(.string("x"), named: "fleet.b")
        let outcome = watcher.finish()
        #expect(outcome.status == 0, "\(outcome)")
        let events = try outcome.jsonLines()
        #expect(events.map { $0["key"] as? String } == ["fleet.old", "fleet.a", "fleet.b"])
    }

    @Test func namesThatDifferOnlyInNormalisationAreDifferentKeys() throws {
        let (composed, decomposed) = ("caf\u{E9}", "cafe\u{301}")
        let fixture = try TemporaryStore()
        let store = try fixture.open()
        let start = try store.lastSequence()
        try store.setStoredValue(.int(1), named: composed)
        try store.setStoredValue(.int(2), named: decomposed)
        let watched = try RunningTool([
            "watch", fixture.path, decomposed, "--since", "\(start)", "--json", "--max-events", "1",
        ]).finish()
        #expect(watched.status == 0, "\(watched)")
        let event = try #require(try watched.jsonLines().first)
        #expect((event["key"] as? String).map { Array($0.utf8) } == Array(decomposed.utf8))
        #expect(event["value"] as? Int == 2)
        // The export file's JSON object cannot keep the two apart once read back: refuse, do
        // not drop one.
        let export = try pdinspect("export", fixture.path, fixture.scratch("export.json"))
        #expect(export.status != 0, "\(export)")
        #expect(export.isOneErrorLine, "\(export)")
        // An import with --replace that names one form removes the other.
        let file = fixture.scratch("import.json")
        let document = #"{"format":"pdinspect-export","version":1,"keys":{"\#(composed)":{"type":"int","value":7}}}"#
        #expect(FileManager.default.createFile(atPath: file, contents: Data(document.utf8)))
        let imported = try pdinspect("import", fixture.path, file, "--replace")
        #expect(imported.status == 0, "\(imported)")
        #expect(try store.keyNames().map { Array($0.utf8) } == [Array(composed.utf8)])
    }

    @Test func watchStopsOnSIGTERM() throws {
        let fixture = try TemporaryStore()
        let watcher = try RunningTool(["watch", fixture.path])
        // The watcher announces itself on stderr once its signal handlers are installed.
        #expect(watcher.waitForError(containing: "interrupt to stop"))
        watcher.terminate()
        let outcome = watcher.finish()
        #expect(outcome.status == 0, "\(outcome)")
    }

    @Test func checkPassesAConsistentStore() throws {
        let fixture = try TemporaryStore()
        let human = try pdinspect("check", fixture.path)
        #expect(human.status == 0)
        #expect(human.stdout.hasPrefix("ok: 7 keys"))
        let json = try #require(try pdinspect("check", fixture.path, "--json").json() as? [String: Any])
        #expect(json["ok"] as? Bool == true)
    }

    @Test func compactWritesAReadableCopy() throws {
        let fixture = try TemporaryStore()
        let out = fixture.scratch("compacted")
        let outcome = try pdinspect("compact", fixture.path, out, "--json")
        #expect(outcome.status == 0, "\(outcome)")
        let report = try #require(try outcome.json() as? [String: Any])
        #expect((report["sizeAfter"] as? Int ?? 0) > 0)
        #expect(outcome.stderr.contains("compacting"))
        #expect(try pdinspect("get", out, "theme").stdout == "dark\n")
        let notEmpty = try pdinspect("compact", fixture.path, out)
        #expect(notEmpty.status == 2)
        #expect(notEmpty.stderr == "pdinspect: \(out) is not empty\n")
    }

    @Test func readersListsTheLockTable() throws {
        let fixture = try TemporaryStore()
        let json = try #require(
            try pdinspect("readers", fixture.path, "--clear-stale", "--json").json() as? [String: Any])
        #expect(json["maxReaders"] as? Int == 126)
        #expect(json["clearedStale"] as? Int == 0)
        let human = try pdinspect("readers", fixture.path)
        #expect(human.status == 0)
    }

    @Test func readingVerbsLeaveTheDataFileUnchanged() throws {
        let fixture = try TemporaryStore()
        let before = fixture.dataBytes
        let commands: [[String]] = [
            ["keys", fixture.path], ["get", fixture.path, "theme"], ["dump", fixture.path, "--json"],
            ["export", fixture.path, fixture.scratch("e.json")], ["stat", fixture.path], ["log", fixture.path],
            ["check", fixture.path], ["readers", fixture.path, "--clear-stale"],
            ["compact", fixture.path, fixture.scratch("copy")], ["watch", fixture.path, "--timeout", "0.1"],
        ]
        for command in commands {
            let outcome = try pdinspect(arguments: command)
            #expect(outcome.status == 0, "\(command): \(outcome)")
        }
        #expect(fixture.dataBytes == before)
    }
}
