import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

private struct VolumeKey: PersistentDefaultsKey { static let defaultValue = 0.5 }
private struct RenamedKey: PersistentDefaultsKey {
    static let defaultValue = ""
    static var name: String { "legacy.renamed" }
}
/// Keeps the highest value ever set: overwrites only upwards, never removes.
private struct HighScoreKey: PersistentDefaultsKey {
    static let defaultValue = 0
    static func shouldRemove(_ value: Int) -> Bool { false }
    static func shouldOverwrite(_ oldValue: Int, _ newValue: Int) -> Bool { newValue > oldValue }
}
private struct Preferences: Codable, Equatable, Sendable {
    var fontSize = 12
    var names: [String] = []
}
private struct PreferencesKey: PersistentDefaultsKey { static let defaultValue = Preferences() }

@Suite struct KeyTypeTests {
    @Test func theDefaultNameIsTheTypeNameWithoutKey() {
        #expect(FirstLaunchKey.name == "firstLaunch")
        #expect(VolumeKey.name == "volume")
        #expect(RenamedKey.name == "legacy.renamed")
    }

    @Test func aValueEqualToTheDefaultIsRemoved() throws {
        try withTemporaryStore { store, _, _ throws in
            store[FirstLaunchKey()] = true
            #expect(try store.contains(FirstLaunchKey()))
            store[FirstLaunchKey()] = false
            #expect(try store.contains(FirstLaunchKey()) == false)
            #expect(store[FirstLaunchKey()] == false)
            store[VolumeKey()] = 0.75
            #expect(try store.storedValue(named: "volume") == .double(0.75))
        }
    }

    @Test func anUnchangedValueIsNotRewritten() throws {
        try withTemporaryStore { store, _, _ throws in
            store[VolumeKey()] = 0.8
            let sequence = try store.lastSequence()
            store[VolumeKey()] = 0.8
            #expect(try store.lastSequence() == sequence)
        }
    }

    @Test func customHooksDecide() throws {
        try withTemporaryStore { store, _, _ throws in
            store[HighScoreKey()] = 10
            store[HighScoreKey()] = 5
            #expect(store[HighScoreKey()] == 10)
            store[HighScoreKey()] = 0
            #expect(store[HighScoreKey()] == 10)
            store[HighScoreKey()] = 12
            #expect(store[HighScoreKey()] == 12)
        }
    }

    @Test func theNameOverrideIsTheStoredName() throws {
        try withTemporaryStore { store, _, _ throws in
            try store.set("x", for: RenamedKey())
            #expect(try store.keyNames() == ["legacy.renamed"])
            try store.remove(RenamedKey())
            #expect(try store.keyNames().isEmpty)
        }
    }

    @Test func conversionsAndCodableKeyTypesWork() throws {
        try withTemporaryStore { store, _, _ throws in
            store[.legacyFlag] = true
            #expect(try store.storedValue(named: "legacyFlag") == .int(1))
            try store.setStoredValue(.int(0), named: "legacyFlag")
            #expect(store[.legacyFlag] == false)
            try store.setStoredValue(.int(7), named: "legacyFlag")
            #expect(try store.value(for: .legacyFlag) == true)
            store[PreferencesKey()] = Preferences(fontSize: 14, names: ["a"])
            #expect(store[PreferencesKey()] == Preferences(fontSize: 14, names: ["a"]))
            #expect(try store.storedValue(named: "preferences")?.tag == .json)
            try store.write { tx in tx[PreferencesKey()].fontSize += 1 }
            #expect(store[PreferencesKey()].fontSize == 15)
        }
    }
}
