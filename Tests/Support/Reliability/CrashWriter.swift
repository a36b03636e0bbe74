import Foundation
import PersistentDefaults

/// The writer side of the crash test: random multi-key transactions, one acknowledgement line
/// per commit that returned, until the process is killed.
public enum CrashWriter {
    /// Commits random transactions into the store at `path` forever (or `limit` times) and
    /// calls `acknowledge` with each commit's number and entries after the commit returned.
    public static func run(
        path: String, seed: UInt64, options: PersistentDefaults.Options, limit: Int = .max,
        acknowledge: (UInt64, [CrashPayload.Entry]) -> Void
    ) throws {
        let store = try PersistentDefaults(path: path, options: options)
        let manifestKey = PersistentDefaults.Key<Data>(CrashPayload.manifestName, default: Data())
        var random = SplitMix64(seed: seed)
        var done = 0
        while done < limit {
            let entries = CrashPayload.randomEntries(using: &random)
            let number = try store.write { transaction -> UInt64 in
                // The body runs again if the map must grow, so it only reads and writes `transaction`.
                let previous = CrashPayload.decodeManifest(Array(try transaction.value(for: manifestKey)))
                let number = (previous?.number ?? 0) + 1
                for entry in entries {
                    let key = PersistentDefaults.Key<Data>(CrashPayload.keyName(entry.index), default: Data())
                    if let length = entry.length {
                        try transaction.set(CrashPayload.value(number: number, length: length), for: key)
                    } else {
                        try transaction.remove(key)
                    }
                }
                try transaction.set(CrashPayload.manifest(number: number, entries: entries), for: manifestKey)
                return number
            }
            acknowledge(number, entries)
            done += 1
        }
    }

    /// The line a writer process prints for a commit that returned: `ack <number> <entry>,<entry>…`.
    public static func acknowledgement(number: UInt64, entries: [CrashPayload.Entry]) -> String {
        "ack \(number) " + entries.map(\.description).joined(separator: ",")
    }

    /// Parses one acknowledgement line; nil for anything else (such as a line cut by the kill).
    public static func parseAcknowledgement(_ line: Substring) -> (number: UInt64, entries: [CrashPayload.Entry])? {
        let words = line.split(separator: " ")
        guard words.count == 3, words[0] == "ack", let number = UInt64(words[1]) else { return nil }
        let entries = words[2].split(separator: ",").compactMap(CrashPayload.Entry.init)
        guard entries.count == words[2].split(separator: ",").count, !entries.isEmpty else { return nil }
        return (number, entries)
    }
}
