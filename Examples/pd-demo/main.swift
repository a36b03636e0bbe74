import Foundation
import PersistentDefaults

// The README's main job: open a throwaway store (or the store in DIR: `pd-demo [DIR]`), declare
// the keys, write a few of them in one transaction, read them back in one snapshot, and print
// them with the commit log. Declared keys are what `pdinspect keys --all` and `describe` show.

extension PersistentDefaults.Keys {
    static let launchCount = Key<Int>("launchCount", default: 0)
    static let theme = Key<Theme>("theme", default: .system)
    static let frame = Key<WindowFrame>("frame", default: .init())
    static let recent = Key<[String]>("recent", default: [])
    static let maxConnections = Key<Int>("maxConnections", default: 64)
}

enum Theme: String, Codable, Sendable { case light, dark, system }
struct WindowFrame: Codable, Equatable, Sendable {
    var x = 0, y = 0
    var title = ""
}

do {
    // A throwaway store is removed when `store` goes; a path given on the command line is kept.
    let arguments = CommandLine.arguments.dropFirst()
    let store = try arguments.first.map { try PersistentDefaults(path: $0) } ?? PersistentDefaults.temporary()
    try store.declare(.launchCount, .theme, .frame, .recent)
    try store.declare(.maxConnections, summary: "Upper bound on open client connections")
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
    print("declared keys:")
    for declaration in try store.declarations() { print("  \(declaration)") }
    print("commit log:")
    for record in try store.commits(after: 0) {
        let changes = record.changes.isEmpty ? "(declarations)" : record.changedKeys.joined(separator: ", ")
        print("  #\(record.sequence) pid \(record.processID): \(changes)")
    }
} catch {
    FileHandle.standardError.write(Data("pd-demo: \(error)\n".utf8))
    exit(1)
}
