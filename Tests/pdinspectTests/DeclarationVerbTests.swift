import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

@testable import PDInspectCore

/// The keys the fixture's code "declares": one stored (`launchCount`), others not.
private enum Declared {
    static let launchCount = PersistentDefaults.Key<Int>("launchCount", default: 0)
    static let maxConnections = PersistentDefaults.Key<Int>("maxConnections", default: 64)
    static let nickname = PersistentDefaults.Key<String?>("nickname")
    static let window = PersistentDefaults.Key<[String: Int]>("window.size", default: ["w": 800])

    /// A seeded fixture with the keys declared.
    static func fixture() throws -> TemporaryStore {
        let fixture = try TemporaryStore()
        let store = try fixture.open()
        try store.declare(launchCount, nickname, window)
        try store.declare(maxConnections, summary: "Upper bound on open client connections")
        return fixture
    }
}

/// Declared keys as `pdinspect` shows and enforces them.
@Suite("pdinspect declared keys")
struct DeclarationVerbTests {
    @Test func keysAllListsDeclaredKeysThatAreNotStoredWithTheirDefault() throws {
        let fixture = try Declared.fixture()
        let plain = try pdinspect("keys", fixture.path)
        #expect(!plain.stdout.contains("maxConnections"), "without --all only stored keys")
        let all = try pdinspect("keys", fixture.path, "--all")
        #expect(all.status == 0, "\(all)")
        #expect(all.stdout.contains("maxConnections  int      -     (default 64, not stored)\n"), "\(all.stdout)")
        #expect(all.stdout.contains("nickname        string?  -     (default null, not stored)\n"), "\(all.stdout)")
        #expect(all.stdout.contains("launchCount     int      9\n"), "a stored declared key is listed once")
        #expect(!all.stdout.contains(" \n"), "no padding at the ends of lines")
        let lines = all.stdout.split(separator: "\n").map { String($0.prefix { $0 != " " }) }
        #expect(lines == lines.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        let json = try #require(
            try pdinspect("keys", fixture.path, "--all", "--prefix", "window.", "--json").json() as? [[String: Any]])
        #expect(json.map { $0["name"] as? String } == ["window.frame", "window.size", "window.visible"])
        let declared = try #require(json.first { $0["name"] as? String == "window.size" })
        #expect(declared["stored"] as? Bool == false)
        #expect(declared["type"] as? String == "json")
        #expect(((declared["default"] as? [String: Any])?["value"] as? [String: Any])?["w"] as? Int == 800)
        #expect(json.first?["stored"] == nil, "stored rows look as they do without --all")
    }

    @Test func getOfAnUnsetDeclaredKeyPrintsTheDefaultAndSaysSo() throws {
        let fixture = try Declared.fixture()
        let human = try pdinspect("get", fixture.path, "maxConnections")
        #expect(human.status == 0, "\(human)")
        #expect(human.stdout == "64\n")
        #expect(human.stderr == "pdinspect: key \"maxConnections\" is not stored; printed its declared default\n")
        let json = try #require(try pdinspect("get", fixture.path, "maxConnections", "--json").json() as? [String: Any])
        #expect(json["default"] as? Bool == true)
        #expect(json["value"] as? Int == 64)
        #expect(json["type"] as? String == "int")
        let stored = try #require(try pdinspect("get", fixture.path, "launchCount", "--json").json() as? [String: Any])
        #expect(stored["default"] == nil)
        let absent = try pdinspect("get", fixture.path, "undeclared")
        #expect(absent.status == 1)
        #expect(absent.stderr == "pdinspect: key \"undeclared\" is absent\n")
    }

    @Test func describeShowsTypeDefaultSummaryValueAndLastChange() throws {
        let fixture = try Declared.fixture()
        let store = try fixture.open()
        try store.set(100, for: Declared.maxConnections)
        let sequence = try store.lastSequence()
        let human = try pdinspect("describe", fixture.path, "maxConnections")
        #expect(human.status == 0, "\(human)")
        #expect(human.stdout.contains("type         int (declared)\n"), "\(human.stdout)")
        #expect(human.stdout.contains("default      64\n"))
        #expect(human.stdout.contains("summary      Upper bound on open client connections\n"))
        #expect(human.stdout.contains("value        100\n"))
        #expect(human.stdout.contains("last change  #\(sequence)  "), "\(human.stdout)")
        #expect(human.stdout.contains("pid \(getpid())"))
        let json = try #require(
            try pdinspect("describe", fixture.path, "maxConnections", "--json").json() as? [String: Any])
        #expect(json["declared"] as? Bool == true)
        #expect(json["summary"] as? String == "Upper bound on open client connections")
        #expect((json["lastChange"] as? [String: Any])?["sequence"] as? Int == Int(sequence))
        #expect((json["declaredIn"] as? [String: Any])?["sequence"] as? Int == 4)
        #expect((json["value"] as? [String: Any])?["value"] as? Int == 100)
        // Declared, never set: no value and no change in the log.
        let unset = try pdinspect("describe", fixture.path, "nickname")
        #expect(unset.stdout.contains("value        not stored: reads give the default\n"), "\(unset.stdout)")
        #expect(unset.stdout.contains("last change  none in the commit log (it holds #1…#\(sequence))\n"))
        // Stored, never declared.
        let theme = try pdinspect("describe", fixture.path, "theme")
        #expect(theme.stdout.contains("type         string (not declared)\n"), "\(theme.stdout)")
        let neither = try pdinspect("describe", fixture.path, "nothing")
        #expect(neither.status == 1)
        #expect(neither.stderr == "pdinspect: key \"nothing\" is neither stored nor declared\n")
    }

    @Test func logMarksTheDeclarationCommit() throws {
        let fixture = try Declared.fixture()
        let log = try pdinspect("log", fixture.path, "--since", "2", "--limit", "1")
        #expect(log.stdout.contains("#3  "), "\(log.stdout)")
        #expect(log.stdout.contains("    (no value changes: key declarations)\n"), "\(log.stdout)")
    }

    static let refusals: [(arguments: [String], declared: String)] = [
        (["set", "DB", "maxConnections", "many", "--type", "string"], "declared as int, not string"),
        (["set", "DB", "maxConnections", "64", "--type", "uint"], "declared as int, not uint"),
        (["set", "DB", "nickname", "7", "--type", "int"], "declared as string?, not int"),
        (["set", "DB", "window.size", "big", "--type", "string"], "declared as json, not string"),
    ]

    @Test func setAndImportRefuseAValueOfAnotherTypeThanDeclaredUnlessForced() throws {
        let fixture = try Declared.fixture()
        let before = fixture.dataBytes
        for item in Self.refusals {
            let outcome = try pdinspect(arguments: item.arguments.map { $0 == "DB" ? fixture.path : $0 })
            #expect(outcome.status == 2, "\(item.arguments): \(outcome)")
            #expect(outcome.isOneErrorLine, "\(outcome)")
            #expect(outcome.stderr.contains(item.declared), "\(outcome)")
        }
        let file = fixture.scratch("import.json")
        let document =
            #"{"format":"pdinspect-export","version":1,"keys":{"a":{"type":"int","value":1},"maxConnections":{"type":"string","value":"x"}}}"#
        try Data(document.utf8).write(to: URL(fileURLWithPath: file))
        let refusedImport = try pdinspect("import", fixture.path, file)
        #expect(refusedImport.status == 2, "\(refusedImport)")
        #expect(refusedImport.isOneErrorLine)
        #expect(refusedImport.stderr.contains("\"maxConnections\" is declared as int, not string"))
        #expect(fixture.dataBytes == before, "nothing was written")
        // The declared type, and null for an optional, are taken.
        #expect(try pdinspect("set", fixture.path, "maxConnections", "12", "--type", "int").status == 0)
        #expect(try pdinspect("set", fixture.path, "window.size", #"{"w":1}"#, "--type", "json").status == 0)
        // --force stores any type; check then reports the value.
        let forced = try pdinspect("set", fixture.path, "maxConnections", "many", "--type", "string", "--force")
        #expect(forced.status == 0, "\(forced)")
        #expect(try fixture.open().storedValue(named: "maxConnections") == .string("many"))
        let forcedImport = try pdinspect("import", fixture.path, file, "--force")
        #expect(forcedImport.status == 0, "\(forcedImport)")
        let check = try pdinspect("check", fixture.path)
        #expect(check.status == 1, "\(check)")
        #expect(
            check.stdout.contains(
                "value of \"maxConnections\": stored string \"x\" does not decode as the declared type int"),
            "\(check.stdout)")
        let describe = try pdinspect("describe", fixture.path, "maxConnections")
        #expect(describe.stdout.contains("problem      stored string \"x\" does not decode"), "\(describe.stdout)")
    }

    @Test func setAndImportRefuseAValueOverTheSizeLimitInOneLine() throws {
        let fixture = try TemporaryStore()
        let errors = CollectedLines()
        let console = Console(output: { _ in }, error: { errors.append($0) })
        let limit = PersistentDefaults.Options().maxValueSize
        // The value cannot pass through argv (128 KiB per argument), so the parsed command is run here.
        let code = Runner(console: console).run(
            .set(database: fixture.path, key: "blob", value: .data(Data(count: limit))))
        #expect(code == .usage)
        let message = errors.all
        #expect(message.count == 1)
        #expect(
            message.first
                == "pdinspect: value of key \"blob\" is \(limit + 1) bytes, over the limit of \(limit) bytes "
                + "(Options.maxValueSize); nothing was written\n")
        let before = fixture.dataBytes
        // Through a real import file of 64 MiB and one byte of data (base64 in JSON).
        let file = fixture.scratch("large.json")
        let payload = Data(count: limit).base64EncodedString()
        let text =
            #"{"format":"pdinspect-export","version":1,"keys":{"blob":{"type":"data","value":""#
            + payload + #""}}}"#
        try Data(text.utf8).write(to: URL(fileURLWithPath: file))
        let outcome = try pdinspect("import", fixture.path, file)
        #expect(outcome.status == 2, "\(outcome.status) \(outcome.stderr)")
        #expect(outcome.isOneErrorLine)
        #expect(outcome.stderr.contains("is \(limit + 1) bytes, over the limit of \(limit) bytes"))
        #expect(fixture.dataBytes == before)
    }

    /// Keys of the types narrower than their stored tag, each with a value `set` must refuse
    /// (the code cannot read it) and one at the edge of the type that it must take.
    static let narrowTypes:
        [(key: PersistentDefaults.Keys, type: String, tag: String, refused: String, taken: String)] = [
            (PersistentDefaults.Key<Int8>("level", default: 0), "int8", "int", "1000", "-128"),
            (PersistentDefaults.Key<UInt8>("u8", default: 0), "uint8", "uint", "256", "255"),
            (PersistentDefaults.Key<Int16>("i16", default: 0), "int16", "int", "-32769", "32767"),
            (PersistentDefaults.Key<UInt16>("u16", default: 0), "uint16", "uint", "65536", "65535"),
            (PersistentDefaults.Key<Int32>("i32", default: 0), "int32", "int", "2147483648", "-2147483648"),
            (PersistentDefaults.Key<UInt32?>("u32"), "uint32?", "uint", "4294967296", "4294967295"),
            (PersistentDefaults.Key<Float>("gain", default: 1), "float", "double", "1e300", "3.4e38"),
            (PersistentDefaults.Key<Float>("tiny", default: 1), "float", "double", "1e-50", "1e-45"),
        ]

    /// A declaration recorded only the stored tag: an `Int8` key was declared `int`, so
    /// `set level 1000 --type int` was taken (exit 0), `check` passed, and the code's read of the
    /// key failed (`decodingFailed`, then the default); the same for every integer narrower than
    /// 64 bits and for `Float`. `set` now refuses such a value in one line (exit 2, nothing
    /// written), `check` reports one stored with `--force`, and `keys --all` and `describe` show
    /// the precise type.
    @Test func setRefusesAValueTheDeclaredNarrowTypeCannotHoldAndCheckReportsIt() throws {
        let fixture = try TemporaryStore()
        let store = try fixture.open()
        try store.declare(Self.narrowTypes.map(\.key))
        let before = fixture.dataBytes
        for item in Self.narrowTypes {
            let refused = try pdinspect("set", fixture.path, item.key.name, item.refused, "--type", item.tag)
            #expect(refused.status == 2, "\(item.key.name) \(item.refused): \(refused)")
            #expect(refused.isOneErrorLine, "\(refused)")
            #expect(refused.stderr.contains("key \"\(item.key.name)\" is declared as \(item.type)"), "\(refused)")
        }
        #expect(fixture.dataBytes == before, "nothing was written")
        let level = try pdinspect("set", fixture.path, "level", "1000", "--type", "int")
        #expect(
            level.stderr
                == "pdinspect: key \"level\" is declared as int8 (-128…127), which does not hold 1000; nothing was "
                + "written (--force stores it anyway)\n")
        let gain = try pdinspect("set", fixture.path, "gain", "1e300", "--type", "double")
        #expect(gain.stderr.contains("is declared as float (±3.4028235e+38), which does not hold 1e+300;"), "\(gain)")
        let all = try pdinspect("keys", fixture.path, "--all")
        #expect(all.stdout.contains("level           int8     -     (default 0, not stored)\n"), "\(all.stdout)")
        #expect(all.stdout.contains("u32             uint32?  -     (default null, not stored)\n"), "\(all.stdout)")
        #expect(all.stdout.contains("gain            float    -     (default 1.0, not stored)\n"), "\(all.stdout)")
        for item in Self.narrowTypes {
            let taken = try pdinspect("set", fixture.path, item.key.name, item.taken, "--type", item.tag)
            #expect(taken.status == 0, "\(item.key.name) \(item.taken): \(taken)")
        }
        #expect(try store.value(for: PersistentDefaults.Key<Int8>("level", default: 0)) == -128)
        #expect(try store.value(for: PersistentDefaults.Key<UInt32?>("u32")) == .max)
        #expect(try store.value(for: PersistentDefaults.Key<Float>("tiny", default: 1)) == Float(1e-45))
        #expect(try pdinspect("check", fixture.path).status == 0)
        let describe = try pdinspect("describe", fixture.path, "level")
        #expect(describe.stdout.contains("type         int8 (declared)\n"), "\(describe.stdout)")
        // --force stores it anyway; check then reports it, and the code's read fails.
        let forced = try pdinspect("set", fixture.path, "level", "1000", "--type", "int", "--force")
        #expect(forced.status == 0, "\(forced)")
        #expect(throws: PersistentDefaultsError.self) {
            try store.value(for: PersistentDefaults.Key<Int8>("level", default: 0))
        }
        let check = try pdinspect("check", fixture.path)
        #expect(check.status == 1, "\(check)")
        #expect(
            check.stdout.contains("value of \"level\": stored int 1000 does not decode as the declared type int8"),
            "\(check.stdout)")
        // import checks the same way, inside its one transaction.
        let file = fixture.scratch("import.json")
        let document =
            #"{"format":"pdinspect-export","version":1,"keys":{"a":{"type":"int","value":1},"u8":{"type":"uint","value":300}}}"#
        try Data(document.utf8).write(to: URL(fileURLWithPath: file))
        let beforeImport = fixture.dataBytes
        let refusedImport = try pdinspect("import", fixture.path, file)
        #expect(refusedImport.status == 2, "\(refusedImport)")
        #expect(refusedImport.stderr.contains("key \"u8\" is declared as uint8"), "\(refusedImport)")
        #expect(fixture.dataBytes == beforeImport)
    }

    /// `UInt64` is stored as `uint` at its full width: a value above `Int64.max` is taken for a
    /// `UInt64` key (and read back by the code), and refused for an `Int64` key in one line,
    /// whichever `--type` carries it.
    @Test func aUInt64KeyTakesAValueAboveInt64MaxAndAnInt64KeyRefusesIt() throws {
        let fixture = try TemporaryStore()
        let store = try fixture.open()
        let serial = PersistentDefaults.Key<UInt64>("serial", default: 0)
        let offset = PersistentDefaults.Key<Int64>("offset", default: 0)
        try store.declare(serial, offset)
        let above = "9223372036854775808"
        let before = fixture.dataBytes
        for (type, message) in [("uint", "declared as int, not uint"), ("int", "is not a valid int value")] {
            let refused = try pdinspect("set", fixture.path, "offset", above, "--type", type)
            #expect(refused.status == 2, "\(refused)")
            #expect(refused.isOneErrorLine && refused.stderr.contains(message), "\(refused)")
        }
        #expect(fixture.dataBytes == before)
        let taken = try pdinspect("set", fixture.path, "serial", "18446744073709551615", "--type", "uint")
        #expect(taken.status == 0, "\(taken)")
        #expect(try store.value(for: serial) == .max)
        #expect(try pdinspect("set", fixture.path, "serial", above, "--type", "uint").status == 0)
        #expect(try store.value(for: serial) == 1 << 63)
        #expect(try pdinspect("describe", fixture.path, "serial").stdout.contains("type         uint (declared)\n"))
        #expect(try pdinspect("check", fixture.path).status == 0)
    }
}
