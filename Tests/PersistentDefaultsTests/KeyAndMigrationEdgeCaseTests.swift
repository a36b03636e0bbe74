import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

// The API an app developer touches: typed keys, hooks, conversions, migrations and the standard
// store (found by the sixth audit; each test failed before its fix, or is marked a known issue).

private struct HighWaterMarkKey: PersistentDefaultsKey {
    static let defaultValue = 0
    // A high-water mark: only a larger value replaces the stored one.
    static func shouldOverwrite(_ oldValue: Int, _ newValue: Int) -> Bool { newValue > oldValue }
}

private struct NicknameKey: PersistentDefaultsKey { static let defaultValue: String? = nil }

@Suite struct KeyAndMigrationEdgeCaseTests {
    @Test func aMigrationToAVersionAboveUInt32MaxRunsAtMostOnce() throws {
        // A date-stamped version such as 202612011530 (yyyyMMddHHmm) is above UInt32.max.
        let store = try PersistentDefaults.temporary()
        let counter = PersistentDefaults.Key<Int>("counter", default: 0)
        for _ in 0..<3 { _ = try? store.migrate(to: 202_612_011_530) { tx in tx[counter] += 100 } }
        #expect(store[counter] <= 100)
    }

    @Test func aReadOnlyOpenOfAMigratedStoreGetsFalseFromMigrate() throws {
        try withTemporaryDirectory { path in
            let counter = PersistentDefaults.Key<Int>("counter", default: 0)
            var readOnly = PersistentDefaults.Options()
            readOnly.readOnly = true
            do {
                let store = try PersistentDefaults(path: path)
                #expect(try store.migrate(to: 1) { tx in tx[counter] += 1 })
                // A read-only handle next to a writable one, then a read-only store: "call it at every start".
                let reader = try PersistentDefaults(path: path, options: readOnly)
                #expect(try reader.migrate(to: 1) { tx in tx[counter] += 1 } == false)
            }
            let reader = try PersistentDefaults(path: path, options: readOnly)
            #expect(try reader.migrate(to: 1) { tx in tx[counter] += 1 } == false)
            #expect(throws: PersistentDefaultsError.readOnly(path: reader.path)) {
                try reader.migrate(to: 2) { tx in tx[counter] += 1 }
            }
            #expect(reader[counter] == 1)
        }
    }

    /// A `migration-version` that is not 4 bytes (another tool wrote `"2"`, or `00 00 00 00 02`) was
    /// read as whatever its bytes shifted into: `"2"` (0x32) as version 50, so `migrate(to: 2)`
    /// returned false and the migrations up to 50 never ran; five bytes read as their last four.
    /// It is refused with `decodingFailed`, and nothing runs or is written.
    @Test func aMalformedMigrationVersionIsAnErrorNotAnotherVersion() throws {
        let counter = PersistentDefaults.Key<Int>("counter", default: 0)
        for malformed in [Array("2".utf8), [0, 0, 0, 0, 2], []] {
            try withTemporaryDirectory { path in
                do { _ = try PersistentDefaults(path: path) }
                try rawLMDBPut(
                    path, [RawLMDBEntry(database: "meta", key: Array("migration-version".utf8), value: malformed)])
                let store = try PersistentDefaults(path: path)
                let sequence = try store.lastSequence()
                #expect(throws: PersistentDefaultsError.self, "\(malformed)") { try store.migrationVersion() }
                #expect(throws: PersistentDefaultsError.self, "\(malformed)") {
                    try store.migrate(to: 2) { tx in tx[counter] += 1 }
                }
                #expect(store[counter] == 0)
                #expect(try store.lastSequence() == sequence)
            }
        }
    }

    /// A migration record that is not one (another tool wrote `migration/0000000002`) made
    /// `migrations()` throw Foundation's `DecodingError`, which no `catch PersistentDefaultsError`
    /// catches; it is `decodingFailed` naming the record's key.
    @Test func aMalformedMigrationRecordIsAPersistentDefaultsError() throws {
        try withTemporaryDirectory { path in
            do { try PersistentDefaults(path: path).migrate(to: 1) { _ in } }
            try rawLMDBPut(
                path, [RawLMDBEntry(database: "meta", key: Array("migration/0000000002".utf8), value: Array("{".utf8))])
            let store = try PersistentDefaults(path: path)
            #expect {
                try store.migrations()
            } throws: { error in
                guard case PersistentDefaultsError.decodingFailed(let key, _, _) = error else { return false }
                return key == "migration/0000000002"
            }
        }
    }

    /// The documentation said `migrate` "runs body once per store"; a body whose writes need a
    /// larger map runs again (3 runs for 4 MiB in a new 1 MiB map), as `write { }` documents.
    /// What the store gets is still one migration: one commit of the last run's changes.
    @Test func aMigrationThatMustGrowTheMapCommitsOnlyItsLastRun() throws {
        try withTemporaryStore { store, _, _ in
            let ran = PersistentDefaults.Key<Int>("ran", default: 0)
            var runs = 0
            let migrated = try store.migrate(to: 1) { tx in
                runs += 1
                tx[ran] += 1
                for index in 0..<8 {
                    try tx.set(
                        Data(count: 512 << 10), for: PersistentDefaults.Key<Data>("blob\(index)", default: Data()))
                }
            }
            #expect(migrated)
            #expect(runs > 1, "the 4 MiB need a larger map: the case the documentation describes")
            #expect(store[ran] == 1)
            #expect(try store.migrations().count == 1)
            #expect(try store.commits(after: 0).count == 1)
        }
    }

    @Test func anIntegerThatADoubleCannotHoldDoesNotReadAsAnotherNumber() throws {
        let store = try PersistentDefaults.temporary()
        let big: Int64 = (1 << 53) + 1
        try store.setStoredValue(.int(big), named: "n")
        let asDouble = PersistentDefaults.Key<Double>("n", default: 0)
        // "numbers convert between integer and floating-point keys when nothing is lost"
        let read = try? store.value(for: asDouble)
        #expect(read == nil || read.map { Int64(exactly: $0) } == big)
        // A declaration admits what the library reads, by the same rule.
        try store.declare(asDouble)
        let declaration = try #require(try store.declaration(named: "n"))
        #expect(declaration.admits(.int(1 << 53)))
        #expect(!declaration.admits(.int(big)))
    }

    @Test func convertValueIntoAnOptionalKeyRemovesOnNilAsSetDoes() throws {
        let store = try PersistentDefaults.temporary()
        let nickname = PersistentDefaults.Key<String?>("nickname")
        try store.setStoredValue(.string(""), named: "oldNickname")
        try store.migrate(to: 1) { tx in
            try tx.convertValue(named: "oldNickname", from: String.self, to: nickname) { $0.isEmpty ? nil : $0 }
        }
        // `set(nil, for: nickname)` removes the key; the conversion should do the same.
        #expect(try store.contains(nickname) == false)
    }

    @Test func aKeyTypesShouldOverwriteHookIsAskedWhenNothingIsStored() throws {
        let store = try PersistentDefaults.temporary()
        store[HighWaterMarkKey()] = -5  // below the default (0) the key reads
        withKnownIssue("audit 6, not fixed: shouldOverwrite is not asked while nothing is stored") {
            #expect(store[HighWaterMarkKey()] == 0)
        }
    }

    @Test func aLocalKeyTypesNameIsItsTypeName() throws {
        struct LocalFlagKey: PersistentDefaultsKey { static let defaultValue = false }
        #expect(LocalFlagKey.name == "localFlag")
        #expect(NicknameKey.name == "nickname")
    }

    @Test func aDoubleOptionalRoundTrips() throws {
        let store = try PersistentDefaults.temporary()
        let key = PersistentDefaults.Key<Int??>("nested", default: 7)
        store[key] = .some(nil)
        withKnownIssue("audit 6, not fixed: .some(nil) and nil are both stored as null") {
            #expect(store[key] == .some(nil))
        }
    }

    @Test func aWrapperReadInsideAWriteSeesTheStore() throws {
        let store = try PersistentDefaults.temporary()
        let key = PersistentDefaults.Key<Int>("count", default: 0)
        let wrapper = PersistentDefault(key, in: store)
        store[key] = 3
        let seen = try store.write { tx in
            tx[key] = 4
            return wrapper.wrappedValue
        }
        #expect(seen == 3 || seen == 4)
        #expect(wrapper.wrappedValue == 4)
    }
}

@Suite struct StandardStoreHandlerTests {
    @Test func anErrorHandlerMayUseTheStandardStoreWhenItCannotOpen() throws {
        let file = NSTemporaryDirectory() + "pd-audit6-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: file) }
        let child = try ChildProcess(Products.fixture, ["standard-handler-reads-standard", file], errors: .merged)
        let finished = child.waitForExit(timeout: 20)
        if !finished { _ = child.kill() }
        #expect(finished, "the process hung: \(child.text)")
        #expect(child.text.contains("handled at level 1"))
        #expect(child.text.contains("stand-in "))
    }
}
