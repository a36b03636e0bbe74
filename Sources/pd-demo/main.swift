import Foundation
import PersistentDefaults

// The README's main job: open a store in a temporary directory, write a few keys in one
// transaction, read them back in one snapshot, and print them with the commit log.

enum Theme: String, Codable, Sendable { case light, dark, system }
struct WindowFrame: Codable, Equatable, Sendable {
    var x = 0, y = 0
    var title = ""
}

extension PersistentDefaults.Keys {
    static let launchCount = Key<Int>("launchCount", default: 0)
    static let theme = Key<Theme>("theme", default: .system)
    static let frame = Key<WindowFrame>("frame", default: .init())
    static let recent = Key<[String]>("recent", default: [])
}

let directory = FileManager.default.temporaryDirectory
    .appendingPathComponent("pd-demo-\(UUID().uuidString)").path
defer { try? FileManager.default.removeItem(atPath: directory) }

do {
    let store = try PersistentDefaults(path: directory)
    try store.write { tx in
        tx[.launchCount] += 1
        tx[.theme] = .dark
        tx[.frame] = WindowFrame(x: 10, y: 20, title: "Main")
        tx[.recent] = ["notes.txt", "todo.md"]
    }
    store[.launchCount] += 1
    let (count, theme, frame, recent) = try store.read { snapshot in
        (snapshot[.launchCount], snapshot[.theme], snapshot[.frame], snapshot[.recent])
    }
    print("store:       \(store.path)")
    print("launchCount: \(count)")
    print("theme:       \(theme)")
    print("frame:       \(frame)")
    print("recent:      \(recent)")
    print("stored keys:")
    for name in try store.keyNames() {
        let value = try store.storedValue(named: name)
        print("  \(name) = \(value.map { "\($0.tag) \($0)" } ?? "absent")")
    }
    print("commit log:")
    for record in try store.commits(after: 0) {
        print("  #\(record.sequence) pid \(record.processID): \(record.changedKeys.joined(separator: ", "))")
    }
} catch {
    FileHandle.standardError.write(Data("pd-demo: \(error)\n".utf8))
    exit(1)
}
