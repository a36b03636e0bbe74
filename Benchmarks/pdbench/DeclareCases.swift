import Foundation
import PersistentDefaults

/// `declare/5-keys/*`: `store.declare` of five keys of different types, as an app calls it at
/// every start: `already-declared` is the common case (one read, no write); `changed` records
/// a new default each time (one logged commit, bounded durability).
let declareCases: [BenchmarkCase] = [
    BenchmarkCase(name: "declare/5-keys/already-declared") { [try declare(changing: false, $0)] },
    BenchmarkCase(name: "declare/5-keys/changed") { [try declare(changing: true, $0)] },
]

private func declare(changing: Bool, _ context: RunContext) throws -> Measurement {
    let name = "declare/5-keys/" + (changing ? "changed" : "already-declared")
    return try context.withTemporaryDirectory("declare") { path in
        var options = PersistentDefaults.Options()
        options.durability = .bounded(interval: .milliseconds(100))
        let store = try PersistentDefaults(path: path, options: options)
        let fixed: [PersistentDefaults.Keys] = [
            PersistentDefaults.Key<String>("theme", default: "system"),
            PersistentDefaults.Key<WindowFrame>("frame", default: WindowFrame(x: 0, y: 0, title: "")),
            PersistentDefaults.Key<[String]>("recent", default: []),
            PersistentDefaults.Key<String?>("username"),
        ]
        try store.declare(fixed + [PersistentDefaults.Key<Int>("launchCount", default: 0)])
        let samples = try measure(.medium(quick: context.quick)) { index in
            try store.declare(fixed + [PersistentDefaults.Key<Int>("launchCount", default: changing ? index + 1 : 0)])
        }
        return Measurement(name, samples: samples)
    }
}
