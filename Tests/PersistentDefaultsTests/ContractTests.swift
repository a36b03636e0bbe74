import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

// The store's main API, exactly as a user writes it in their own module.

enum Theme: String, Codable, Sendable { case light, dark, system }
struct WindowFrame: Codable, Equatable, Sendable {
    var x = 0, y = 0
    var title = ""
}

extension PersistentDefaults.Keys {
    static let launchCount = Key<Int>("launchCount", default: 0)
    static let username = Key<String?>("username")  // optional: default nil
    static let theme = Key<Theme>("theme", default: .system)
    static let frame = Key<WindowFrame>("frame", default: .init())  // Codable
    static let recent = Key<[String]>("recent", default: [])
}

// Key types: default, name, hooks and conversion as static members.
struct FirstLaunchKey: PersistentDefaultsKey { static let defaultValue = false }
extension PersistentDefaultsKey where Self == FirstLaunchKey { static var firstLaunch: Self { Self() } }

struct IntBoolConversion: ValueConversion {  // stored as Int, read as Bool
    static func decode(data: Int) -> Bool { data > 0 }
    static func encode(value: Bool) -> Int { value ? 1 : 0 }
}
struct LegacyFlagKey: PersistentDefaultsKey {
    typealias Conversion = IntBoolConversion
    static let defaultValue = false
}
extension PersistentDefaultsKey where Self == LegacyFlagKey { static var legacyFlag: Self { Self() } }

let retries = PersistentDefaults.Key<Int>("retries", default: 3)  // keys can also be made at run time

@Suite struct ContractTests {
    @Test func theMainAPIBehavesAsItsCommentsSay() throws {
        try withTemporaryDirectory { dir in
            let store = try PersistentDefaults(path: dir)  // a directory; created if missing
            #expect(FileManager.default.fileExists(atPath: dir + "/data.mdb"))
            store[.launchCount] += 1  // non-throwing; a failed write is reported and leaves the old value
            #expect(store[.launchCount] == 1)
            store[.firstLaunch] = true
            #expect(store[.firstLaunch] == true)
            store[.legacyFlag] = true  // on disk: the Int 1
            #expect(try store.storedValue(named: "legacyFlag") == .int(1))
            #expect(store[.legacyFlag] == true)
            try store.set(Theme.dark, for: .theme)
            let theme = try store.value(for: .theme)  // throws on I/O failure or a value that does not decode
            #expect(theme == .dark)
            store[.username] = "ada"
            #expect(store[.username] == "ada")
            try store.remove(.username)  // reads give the default again
            #expect(store[.username] == nil)
            try store.write { tx in  // one atomic LMDB write transaction
                tx[.launchCount] = 10
                tx[.frame] = WindowFrame(x: 1, y: 2, title: "Main")
            }  // an error thrown inside: nothing is written
            // one snapshot
            let (count, frame) = try store.read { snapshot in (snapshot[.launchCount], snapshot[.frame]) }
            #expect(count == 10)
            #expect(frame == WindowFrame(x: 1, y: 2, title: "Main"))
            #expect(store[retries] == 3)
            store[retries] = 5
            #expect(try store.value(for: retries) == 5)
            store[.recent] = ["a", "b"]
            #expect(store[.recent] == ["a", "b"])
        }
    }

    @Test func aFailedSubscriptWriteIsReportedAndLeavesTheOldValue() throws {
        try withTemporaryStore { store, _, log throws in
            let key = PersistentDefaults.Key<Int>(String(repeating: "k", count: 600), default: 7)
            store[key] = 9
            #expect(store[key] == 7)
            #expect(log.all.contains { if case .invalidKeyName = $0 { true } else { false } })
            store[.launchCount] = 4
            #expect(store[.launchCount] == 4)
            #expect(try store.lastSequence() == 1)
        }
    }
}
