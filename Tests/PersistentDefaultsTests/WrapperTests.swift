import Foundation
import Observation
import PDTestSupport
import PersistentDefaults
import Testing

// Wrappers as an app writes them: `store` is a store the app made, `.theme` uses `.standard`.
let store: PersistentDefaults = {
    let base = temporaryPath("pd-wrapper")
    try? PersistentDefaults.configureStandard(path: base + "/standard")
    // swift-format-ignore: NeverUseForceTry
    return try! PersistentDefaults(path: base + "/app")
}()

final class Settings {
    @PersistentDefault(.launchCount, in: store) var launchCount  // typed key
    @PersistentDefault(.theme) var theme  // PersistentDefaults.standard
    @PersistentDefault("someKey", in: store) var someValue = 0  // a name and an initial value
}

/// Waits for `onChange` of a tracked read, with a timeout.
private func changeIsTracked(reading read: () -> Void, when change: () throws -> Void) rethrows -> Bool {
    let fired = DispatchSemaphore(value: 0)
    withObservationTracking {
        read()
    } onChange: {
        fired.signal()
    }
    try change()
    return fired.wait(timeout: .now() + 10) == .success
}

@Suite(.serialized) struct WrapperTests {
    @Test func wrappersOfTypedKeysNamesAndTheStandardStoreWork() async throws {
        let settings = Settings()
        settings.launchCount += 1  // durable per the store's mode
        #expect(store[.launchCount] == 1)
        #expect(settings.launchCount == 1)
        settings.theme = .dark
        #expect(PersistentDefaults.standard[.theme] == .dark)
        #expect(PersistentDefaults.standard.path.hasSuffix("/standard"))
        #expect(settings.someValue == 0)
        settings.someValue = 7
        #expect(try store.storedValue(named: "someKey") == .int(7))

        var values = settings.$launchCount.values.makeAsyncIterator()  // current then changes
        #expect(await values.next() == 1)
        let changes = Events<KeyChange<Int>>()
        let token = settings.$launchCount.observe { changes.append($0) }  // closure form
        settings.launchCount += 1
        #expect(await values.next() == 2)
        #expect(changes.all.map { [$0.oldValue, $0.newValue] } == [[1, 2]])
        token.cancel()
        try settings.$launchCount.reset()
        #expect(settings.launchCount == 0)
    }

    @Test func aTrackedReadFiresOnChangeForLocalAndOtherProcessesCommits() throws {
        let settings = Settings()
        let local = changeIsTracked(
            reading: { _ = settings.someValue },
            when: {
                store[PersistentDefaults.Key<Int>("someKey", default: 0)] = 40
            })
        #expect(local)
        #expect(settings.someValue == 40)
        let path = store.path
        var status: Int32 = -1
        let remote = try changeIsTracked(
            reading: { _ = settings.someValue },
            when: {
                status = try runFixture(["set-int", path, "someKey", "41"]).status
            })
        #expect(status == 0)
        #expect(remote)
        #expect(settings.someValue == 41)
    }

    @Test func anotherKeysCommitDoesNotFireOnChange() throws {
        let settings = Settings()
        let fired = Counter()
        withObservationTracking {
            _ = settings.someValue
        } onChange: {
            fired.increment()
        }
        store[.recent] = ["unrelated"]
        #expect(fired.value == 0)  // local commits are delivered before the write returns
        settings.someValue += 1
        #expect(fired.value == 1)
    }
}

// MARK: Wrappers in the shapes other settings libraries use

// A name and an initial value, in a plain class and in an @Observable model.

private final class ExampleUserDefault {
    @PersistentDefault("shapes.someKey", in: store) var someValue = 0

    func updateValue(to newValue: Int) {
        someValue = newValue
    }
}

@Observable private final class ExamplePublishedAppStorageViewModel {
    @ObservationIgnored @PersistentDefault("shapes.published", in: store) var someValue = 0
    var unrelated = 0

    func updateValue(to newValue: Int) { someValue = newValue }
}

@Suite(.serialized) struct WrapperShapeTests {
    @Test func aNamedWrapperWithAnInitialValueStoresTheValue() {
        let example = ExampleUserDefault()
        example.updateValue(to: 5)
        #expect(store[PersistentDefaults.Key<Int>("shapes.someKey", default: 0)] == example.someValue)
        #expect(example.someValue == 5)
    }

    @Test func aNamedWrapperInAnObservableModelTellsTheModelsObservers() async throws {
        let model = ExamplePublishedAppStorageViewModel()
        let updated = changeIsTracked(
            reading: { _ = model.someValue }, when: { model.updateValue(to: model.someValue + 1) })
        #expect(updated)
        var values = model.$someValue.values.makeAsyncIterator()  // like Published.Publisher's sink
        #expect(await values.next() == 1)
        model.updateValue(to: 2)
        #expect(await values.next() == 2)
        // Other commits to the key, here through the store, reach the model's observers too.
        let external = changeIsTracked(
            reading: { _ = model.someValue },
            when: {
                store[PersistentDefaults.Key<Int>("shapes.published", default: 0)] = 9
            })
        #expect(external)
    }

    // A named wrapper of a Codable value.
    private struct Note: Codable, Equatable, Sendable {
        var text = "Hello world!"
        var pinned = false
    }
    private final class DataStore {
        @PersistentDefault("shapes.note", in: store) var note = Note()
    }

    @Test func aCodableWrapperLoadsTheSavedValueAndFallsBackWhenItNoLongerDecodes() throws {
        try withTemporaryStore { appStore, _, log throws in
            let key = PersistentDefaults.Key<Note>("note", default: Note())
            appStore[key] = Note(text: "saved", pinned: true)
            let wrapper = PersistentDefault(key, in: appStore)
            #expect(wrapper.wrappedValue == Note(text: "saved", pinned: true))  // loaded at start
            try appStore.setStoredValue(.json(#"{"text": 3}"#), named: "note")
            #expect(wrapper.wrappedValue == Note())  // no crash: the default
            #expect(log.all.contains { if case .decodingFailed(key: "note", _, _) = $0 { true } else { false } })
            #expect(throws: PersistentDefaultsError.self) { try wrapper.projectedValue.value() }
        }
        let dataStore = DataStore()
        dataStore.note.text = "edited"
        #expect(DataStore().note.text == "edited")
    }

    // Key types, conversions and hooks through the wrapper.
    private struct TutorialSeenKey: CodableDefaultsKey { static let defaultValue = [String: Bool]() }
    private final class Flags {
        @PersistentDefault(.firstLaunch, in: store) var firstLaunch
        @PersistentDefault(.legacyFlag, in: store) var legacyFlag
        @PersistentDefault(TutorialSeenKey(), in: store) var tutorials
    }

    @Test func keyTypesWithHooksAndConversionsWorkThroughTheWrapper() throws {
        let flags = Flags()
        flags.firstLaunch = true
        #expect(try store.contains(.firstLaunch))
        flags.firstLaunch = false  // the default: removed (shouldRemove)
        #expect(try store.contains(.firstLaunch) == false)
        flags.legacyFlag = true
        #expect(try store.storedValue(named: "legacyFlag") == .int(1))
        #expect(flags.legacyFlag)
        flags.tutorials["intro"] = true
        #expect(Flags().tutorials == ["intro": true])
        #expect(try store.storedValue(named: "tutorialSeen") == .json(#"{"intro":true}"#))
    }

    // A wrapper that stores durably, serves UI models, publishes, and hears other processes.
    private struct Preferences {
        @PersistentDefault("shapes.isLineWrappingEnabled", in: store) var isLineWrappingEnabled = true
    }

    @Test func aWrapperStoresDurablyPublishesAndHearsOtherProcesses() async throws {
        let preferences = Preferences()
        // 1. Stored, durably: the store's default mode syncs every commit.
        preferences.isLineWrappingEnabled = false
        #expect(try store.storedValue(named: "shapes.isLineWrappingEnabled") == .bool(false))
        // 2. Usable from UI models: tracked reads (see the @Observable model test) and a plain struct here.
        // 3. A publisher-like projected value.
        var values = preferences.$isLineWrappingEnabled.values.makeAsyncIterator()
        #expect(await values.next() == false)
        // 4. Called only when this value changes, also from another process.
        let changes = Events<Bool>()
        let token = preferences.$isLineWrappingEnabled.observe { changes.append($0.newValue) }
        store[.recent] = ["something else"]
        preferences.isLineWrappingEnabled = false  // unchanged
        let path = store.path
        let script = """
            import lmdb, sys
            env = lmdb.open(sys.argv[1], max_dbs=8, subdir=True)
            with env.begin(write=True, db=env.open_db(b"values")) as txn:
                txn.put(b"shapes.isLineWrappingEnabled", bytes([1, 1]))
            """
        if pythonHasLMDB {
            #expect(try runPython(script, [path]) == 0)
            #expect(changes.wait(forCount: 1))
            #expect(changes.all == [true])
            #expect(await values.next() == true)
        } else {
            preferences.isLineWrappingEnabled = true
            #expect(changes.all == [true])
            Issue.record("python3 with the lmdb package is required (tools/setup installs it)")
        }
        _ = token
    }
}

@Suite struct MigrationTests {
    @Test func aMigrationRunsOnceInOneTransactionAndIsRecorded() throws {
        try withTemporaryStore { store, _, _ throws in
            try store.setStoredValue(.string("dark"), named: "appTheme")
            try store.setStoredValue(.string("12"), named: "launchCount")
            let runs = Counter()
            for _ in 0..<3 {
                try store.migrate(to: 1, "rename appTheme; launchCount becomes an Int") { tx in
                    runs.increment()
                    try tx.renameKey("appTheme", to: "theme")
                    try tx.convertValue(named: "launchCount", from: String.self, to: .launchCount) { Int($0) ?? 0 }
                }
            }
            #expect(runs.value == 1)
            #expect(store[.theme] == .dark)
            #expect(try store.contains(PersistentDefaults.Key<String>("appTheme", default: "")) == false)
            #expect(store[.launchCount] == 12)
            #expect(try store.migrationVersion() == 1)
            let records = try store.migrations()
            #expect(records.map(\.version) == [1])
            #expect(records.first?.description == "rename appTheme; launchCount becomes an Int")
            #expect(records.first?.processID == getpid())
            // All of it was one commit.
            #expect(try store.commits(after: 0).last?.changedKeys.sorted() == ["appTheme", "launchCount", "theme"])
        }
    }

    @Test func aFailingMigrationChangesNothing() throws {
        try withTemporaryStore { store, _, _ throws in
            try store.setStoredValue(.int(3), named: "launchCount")
            #expect(throws: PersistentDefaultsError.self) {
                try store.migrate(to: 2) { tx in
                    try tx.renameKey("launchCount", to: "count")
                    try tx.convertValue(named: "count", from: String.self, to: .launchCount) { Int($0) ?? 0 }
                }
            }
            #expect(try store.migrationVersion() == 0)
            #expect(try store.keyNames() == ["launchCount"])
            #expect(try store.migrate(to: 2) { _ in })
            #expect(try store.migrate(to: 1) { _ in } == false)
            #expect(try store.migrations().map(\.version) == [2])
        }
    }
}

@Suite struct StandardStoreTests {
    @Test func theStandardPathFollowsTheEnvironment() {
        let environment = ProcessInfo.processInfo.environment
        let path = PersistentDefaults.standardPath
        if let explicit = environment["PERSISTENT_DEFAULTS_PATH"], !explicit.isEmpty {
            #expect(path == explicit)
        } else {
            let executable = (CommandLine.arguments[0] as NSString).lastPathComponent
            #expect(path.hasSuffix("/\(executable)/defaults"))
            #expect(path.hasPrefix(environment["XDG_CONFIG_HOME"] ?? (NSHomeDirectory() + "/.config")))
        }
    }

    @Test func trackingWorksWhenTheFirstWrappersHandleIsGoneBeforeAnyRead() throws {
        final class Holder {
            @PersistentDefault var count: Int
            init(_ store: PersistentDefaults) { _count = PersistentDefault(.launchCount, in: store) }
        }
        try withTemporaryDirectory { path in
            let kept = try PersistentDefaults(path: path)  // keeps the store open throughout
            do {
                // Makes the key's tracker, never reads, and goes away with its handle.
                _ = Holder(try PersistentDefaults(path: path))
            }
            let holder = Holder(kept)
            #expect(changeIsTracked(reading: { _ = holder.count }, when: { kept[.launchCount] = 5 }))
        }
    }

    @Test func configuringAfterFirstUseIsRefused() {
        _ = store  // configures and opens the standard store's path
        _ = PersistentDefaults.standard
        #expect(throws: PersistentDefaultsError.self) {
            try PersistentDefaults.configureStandard(path: "/tmp/elsewhere")
        }
        // The throwing form gives the same store.
        #expect((try? PersistentDefaults.openStandard()) === PersistentDefaults.standard)
    }
}
