import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

// Key declarations as a user writes them in their own module (keys
// `launchCount`, `theme` and `frame` are declared in ContractTests.swift).
extension PersistentDefaults.Keys {
    static let maxConnections = Key<Int>("maxConnections", default: 64)
    static let nickname = Key<String?>("nickname")
    static let homepage = Key<URL>("homepage", default: URL(string: "https://example.com")!)
}

@Suite struct DeclarationTests {
    @Test func declaringKeysRecordsNameTypeDefaultAndSummary() throws {
        try withTemporaryStore { store, _, _ in
            try store.declare(.launchCount, .theme, .frame)
            try store.declare(.maxConnections, summary: "Upper bound on open client connections")
            let declarations = try store.declarations()
            #expect(declarations.map(\.name) == ["frame", "launchCount", "maxConnections", "theme"])
            let byName = Dictionary(uniqueKeysWithValues: declarations.map { ($0.name, $0) })
            #expect(byName["launchCount"]?.type == .int)
            #expect(try byName["launchCount"]?.defaultValue() == .int(0))
            #expect(byName["theme"]?.type == .string)  // a RawRepresentable: its raw value's tag
            #expect(try byName["theme"]?.defaultValue() == .string("system"))
            #expect(byName["frame"]?.type == .json)
            #expect(try byName["frame"]?.defaultValue() == .json(#"{"title":"","x":0,"y":0}"#))
            #expect(byName["maxConnections"]?.summary == "Upper bound on open client connections")
            #expect(byName["launchCount"]?.summary == nil)
            #expect(byName["launchCount"]?.isOptional == false)
            #expect(byName["maxConnections"]?.processID == getpid())
            #expect(try store.declaration(named: "maxConnections") == byName["maxConnections"])
            #expect(try store.declaration(named: "username") == nil)
        }
    }

    @Test func optionalsConversionsAndKeyTypesDeclareTheirStoredType() throws {
        try withTemporaryStore { store, _, _ in
            try store.declare(.nickname, .homepage)
            try store.declare(.legacyFlag, summary: "stored as an Int")
            try store.declare(.firstLaunch)
            let nickname = try #require(try store.declaration(named: "nickname"))
            #expect(nickname.type == .string)
            #expect(nickname.isOptional)
            #expect(nickname.typeName == "string?")
            #expect(try nickname.defaultValue() == .null)
            #expect(try store.declaration(named: "homepage")?.type == .url)
            #expect(try store.declaration(named: "legacyFlag")?.type == .int)  // the conversion's stored type
            #expect(try store.declaration(named: "legacyFlag")?.summary == "stored as an Int")
            #expect(try store.declaration(named: "firstLaunch")?.type == .bool)
        }
    }

    @Test func aDeclarationIsOneLoggedCommitWithNoValueChangesAndCallsNoKeyObserver() throws {
        try withTemporaryStore { store, _, _ in
            let keyCalls = Counter()
            let commits = Events<CommitRecord>()
            let keyToken = store.observe(.launchCount) { _ in keyCalls.increment() }
            let commitToken = store.observeCommits { commits.append($0) }
            defer {
                keyToken.cancel()
                commitToken.cancel()
            }
            try store.declare(.launchCount, .theme, .frame)
            #expect(try store.lastSequence() == 1)
            let record = try #require(try store.commits(after: 0).first)
            #expect(record.changes.isEmpty)
            #expect(try store.declaration(named: "theme")?.sequence == 1)
            #expect(try store.keyNames().isEmpty, "declaring stores no value")
            #expect(commits.wait(forCount: 1))
            #expect(commits.all.map(\.sequence) == [1])
            #expect(keyCalls.value == 0)
            #expect(store[.launchCount] == 0)
            #expect(try store.verify().isEmpty)
        }
    }

    @Test func declaringTheSameWayAgainWritesNothing() throws {
        try withTemporaryStore { store, path, _ in
            try store.declare(.launchCount, .theme, .frame)
            try store.declare(.maxConnections, summary: "Upper bound")
            let before = try store.statistics().lastTransactionID
            let declarations = try store.declarations()
            try store.declare(.launchCount, .theme, .frame)
            try store.declare(.frame, .launchCount)
            try store.declare(.maxConnections)  // no summary given: the recorded one stays
            try store.declare(.maxConnections, summary: "Upper bound")
            #expect(try store.statistics().lastTransactionID == before, "no write transaction was committed")
            #expect(try store.declarations() == declarations)
            #expect(try store.lastSequence() == 2)
            // Another process (here: another handle of a fresh open) sees the same.
            #expect(try PersistentDefaults(path: path).declarations() == declarations)
        }
    }

    @Test func aKeyDeclaredAgainWithAnotherTypeOrSummaryReplacesTheDeclaration() throws {
        try withTemporaryStore { store, _, _ in
            try store.declare(.maxConnections, summary: "Upper bound")
            let migrated = PersistentDefaults.Key<String>("maxConnections", default: "64")
            try store.declare(migrated)
            let declaration = try #require(try store.declaration(named: "maxConnections"))
            #expect(declaration.type == .string)
            #expect(try declaration.defaultValue() == .string("64"))
            #expect(declaration.summary == "Upper bound", "a declaration without a summary keeps the recorded one")
            #expect(declaration.sequence == 2)
            try store.declare(migrated, summary: "")
            #expect(try store.declaration(named: "maxConnections")?.summary == nil, "an empty summary removes it")
            let changedDefault = PersistentDefaults.Key<String>("maxConnections", default: "128")
            try store.declare(changedDefault)
            #expect(
                try store.declaration(named: "maxConnections")?.encodedDefault == StoredValue.string("128").encodedValue
            )
            #expect(try store.lastSequence() == 4)
            #expect(try store.declarations().count == 1)
        }
    }

    @Test func badDeclarationsAreRefusedAndRecordNothing() throws {
        try withTemporaryStore { store, _, _ in
            let longName = PersistentDefaults.Key<Int>(String(repeating: "n", count: 503), default: 0)
            #expect(PersistentDefaults.maximumDeclaredNameLength == 502)
            #expect {
                try store.declare(.launchCount, longName)
            } throws: { error in
                guard case PersistentDefaultsError.invalidDeclaration(let key, let reason) = error else { return false }
                return key.utf8.count == 503 && reason.contains("at most 502")
            }
            let empty = PersistentDefaults.Key<Int>("", default: 0)
            #expect {
                try store.declare(.theme, empty)
            } throws: { error in
                if case PersistentDefaultsError.invalidKeyName = error { true } else { false }
            }
            let twice = PersistentDefaults.Key<String>("launchCount", default: "zero")
            #expect {
                try store.declare(.launchCount, twice)
            } throws: { error in
                guard case PersistentDefaultsError.invalidDeclaration(_, let reason) = error else { return false }
                return reason.contains("twice")
            }
            #expect {
                try store.declare(.maxConnections, summary: "two\nlines")
            } throws: { error in
                guard case PersistentDefaultsError.invalidDeclaration(_, let reason) = error else { return false }
                return reason.contains("one line")
            }
            #expect(try store.declarations().isEmpty)
            #expect(try store.lastSequence() == 0)
            // The longest name that fits is declared.
            let longest = PersistentDefaults.Key<Int>(String(repeating: "n", count: 502), default: 0)
            try store.declare(longest)
            #expect(try store.declaration(named: longest.name)?.type == .int)
            // The same key given twice the same way is declared once.
            try store.declare(.theme, .theme)
            #expect(try store.declarations().count == 2)
        }
    }

    @Test func aReadOnlyStoreRefusesNewDeclarationsButAcceptsRecordedOnes() throws {
        try withTemporaryDirectory { path in
            do {
                let store = try PersistentDefaults(path: path)
                try store.declare(.launchCount)
            }
            var options = PersistentDefaults.Options()
            options.readOnly = true
            let readOnly = try PersistentDefaults(path: path, options: options)
            try readOnly.declare(.launchCount)  // declared the same way already: a read, no write
            #expect(throws: PersistentDefaultsError.readOnly(path: readOnly.path)) {
                try readOnly.declare(.theme)
            }
            #expect(try readOnly.declarations().map(\.name) == ["launchCount"])
        }
    }

    @Test func verifyReportsAStoredValueThatDoesNotDecodeAsTheDeclaredType() throws {
        try withTemporaryStore { store, _, _ in
            try store.declare(.launchCount, .nickname, .homepage, .frame)
            try store.setStoredValue(.string("three"), named: "launchCount")
            try store.setStoredValue(.null, named: "nickname")  // optional: null is a value
            try store.setStoredValue(.string("https://swift.org"), named: "homepage")  // a URL string reads
            try store.setStoredValue(.string("not json"), named: "frame")  // its JSON form is a string: decodes
            let problems = try store.verify()
            #expect(problems.count == 1, "\(problems)")
            #expect(problems.first?.contains("\"launchCount\"") == true)
            #expect(problems.first?.contains("declared type int") == true)
            try store.set(3, for: .launchCount)
            #expect(try store.verify().isEmpty)
        }
    }

    @Test func declarationsAdmitTheValuesTheLibraryReads() throws {
        try withTemporaryStore { store, _, _ in
            let ratio = PersistentDefaults.Key<Double>("ratio", default: 0.5)
            let count = PersistentDefaults.Key<UInt>("count", default: 0)
            let when = PersistentDefaults.Key<Date>("when", default: Date(timeIntervalSince1970: 0))
            try store.declare(.launchCount, ratio, count, when, .frame)
            let int = try #require(try store.declaration(named: "launchCount"))
            #expect(int.admits(.int(-1)))
            #expect(int.admits(.double(3)))
            #expect(!int.admits(.double(3.5)))
            #expect(!int.admits(.uint(.max)))
            #expect(!int.admits(.null))
            #expect(!int.admits(.string("3")))
            let double = try #require(try store.declaration(named: "ratio"))
            #expect(double.admits(.int(3)) && double.admits(.uint(3)) && !double.admits(.bool(true)))
            let uint = try #require(try store.declaration(named: "count"))
            #expect(uint.type == .uint)
            #expect(uint.admits(.int(3)) && !uint.admits(.int(-3)))
            let date = try #require(try store.declaration(named: "when"))
            #expect(date.admits(.date(Date())) && date.admits(.double(1)) && !date.admits(.string("x")))
            let json = try #require(try store.declaration(named: "frame"))
            #expect(json.admits(.json("[1]")) && json.admits(.int(1)) && !json.admits(.json("{oops")))
            #expect(int.mismatch(of: .string("x")) == "stored string \"x\" does not decode as the declared type int")
        }
    }

    /// A declaration recorded only the stored tag: an `Int8` key was declared `int`, so `verify()`
    /// passed a stored 1000 that the key's read fails on (`decodingFailed`, then the default). The
    /// declaration now records the width of a type narrower than its tag, and admits only what
    /// that type reads.
    @Test func declarationsOfNarrowNumericTypesAdmitOnlyWhatTheTypeReads() throws {
        try withTemporaryStore { store, _, _ in
            let level = PersistentDefaults.Key<Int8>("level", default: 0)
            let port = PersistentDefaults.Key<UInt16?>("port")
            let gain = PersistentDefaults.Key<Float>("gain", default: 1)
            let offset = PersistentDefaults.Key<Int32>("offset", default: 0)
            let serial = PersistentDefaults.Key<UInt64>("serial", default: 0)
            try store.declare(level, port, gain, offset, serial, .launchCount)
            let declared = Dictionary(uniqueKeysWithValues: try store.declarations().map { ($0.name, $0) })
            #expect(
                declared.mapValues(\.typeName) == [
                    "level": "int8", "port": "uint16?", "gain": "float", "offset": "int32", "serial": "uint",
                    "launchCount": "int",
                ])
            let int8 = try #require(declared["level"])
            #expect(int8.type == .int, "the tag stays the stored one")
            #expect(
                int8.admits(.int(127)) && int8.admits(.int(-128)) && int8.admits(.double(-3)) && int8.admits(.uint(5)))
            #expect(!int8.admits(.int(128)) && !int8.admits(.int(1000)) && !int8.admits(.uint(200)))
            #expect(!int8.admits(.double(-129)))
            let uint16 = try #require(declared["port"])
            #expect(uint16.admits(.null) && uint16.admits(.uint(65_535)) && uint16.admits(.int(80)))
            #expect(!uint16.admits(.uint(65_536)) && !uint16.admits(.int(-1)))
            let float = try #require(declared["gain"])
            #expect(float.admits(.double(0.1)) && float.admits(.double(.infinity)) && float.admits(.int(16_777_216)))
            #expect(!float.admits(.double(1e300)) && !float.admits(.double(1e-50)) && !float.admits(.int(16_777_217)))
            let int32 = try #require(declared["offset"])
            #expect(int32.admits(.int(Int64(Int32.min))) && !int32.admits(.int(Int64(Int32.max) + 1)))
            let uint64 = try #require(declared["serial"])
            #expect(uint64.admits(.uint(.max)) && !uint64.admits(.int(-1)))
            #expect(
                int8.mismatch(of: .int(1000)) == "stored int 1000 does not decode as the declared type int8")
            // verify() reports what the code cannot read, and nothing it can.
            try store.setStoredValue(.int(1000), named: "level")
            try store.setStoredValue(.uint(70_000), named: "port")
            try store.setStoredValue(.double(1e300), named: "gain")
            try store.setStoredValue(.uint(.max), named: "serial")
            let problems = try store.verify()
            #expect(problems.count == 3, "\(problems)")
            #expect(problems.contains("value of \"level\": stored int 1000 does not decode as the declared type int8"))
            #expect(problems.contains { $0.contains("\"port\"") && $0.hasSuffix("declared type uint16?") })
            #expect(problems.contains { $0.contains("\"gain\"") && $0.hasSuffix("declared type float") })
            #expect(throws: PersistentDefaultsError.self) { try store.value(for: level) }
            #expect(try store.value(for: serial) == .max)
            // Declared again the same way: a read, no write.
            let before = try store.statistics().lastTransactionID
            try store.declare(level, port, gain, offset, serial, .launchCount)
            #expect(try store.statistics().lastTransactionID == before)
            // Two widths under one name in one call are two types.
            #expect {
                try store.declare(level, PersistentDefaults.Key<Int16>("level", default: 0))
            } throws: { error in
                guard case PersistentDefaultsError.invalidDeclaration(_, let reason) = error else { return false }
                return reason.contains("twice")
            }
            // A wider type declared over a narrower one replaces it (a migration).
            try store.declare(PersistentDefaults.Key<Int16>("level", default: 0))
            #expect(try store.declaration(named: "level")?.typeName == "int16")
            #expect(try store.verify().count == 2)
        }
    }

    /// A declaration recorded before widths were (no `bits` in its JSON) still reads, as the tag's
    /// full width; declaring a narrower key over it rewrites it once, and a key of the full width
    /// leaves it as it is.
    @Test func aDeclarationRecordedWithoutAWidthReadsAndIsRewrittenOnce() throws {
        try withTemporaryDirectory { path in
            do { _ = try PersistentDefaults(path: path) }
            // The form declarations had before `bits`: .int(0) as default.
            func old(_ sequence: Int) -> [UInt8] {
                Array(
                    (#"{"date":807182263.46,"default":"AgAAAAAAAAAA","optional":false,"processID":3344,"#
                        + #""sequence":\#(sequence),"type":"int"}"#).utf8)
            }
            try rawLMDBPut(
                path,
                [
                    RawLMDBEntry(database: "meta", key: Array("declared/level".utf8), value: old(0)),
                    RawLMDBEntry(database: "meta", key: Array("declared/count".utf8), value: old(0)),
                ])
            let store = try PersistentDefaults(path: path)
            let recorded = try #require(try store.declaration(named: "level"))
            #expect(recorded.typeName == "int")
            #expect(recorded.admits(.int(1000)), "no width recorded: the tag's full width")
            try store.setStoredValue(.int(1000), named: "level")
            #expect(try store.verify().isEmpty)
            let sequence = try store.lastSequence()
            let level = PersistentDefaults.Key<Int8>("level", default: 0)
            let count = PersistentDefaults.Key<Int>("count", default: 0)
            try store.declare(level, count)
            #expect(try store.lastSequence() == sequence + 1, "one commit rewrote the old record")
            #expect(try store.declaration(named: "level")?.typeName == "int8")
            #expect(try store.declaration(named: "count")?.sequence == 0, "the full width's record is unchanged")
            #expect(try store.verify().count == 1)
            let before = try store.statistics().lastTransactionID
            try store.declare(level, count)
            #expect(try store.statistics().lastTransactionID == before, "rewritten once, then a read")
        }
    }
}
