import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// The commit log under adversarial timing: processes of many threads with aborted writes, refused
/// values and map growth, finishing or killed. Every acknowledged write is logged exactly once, in
/// order per thread, with sequences 1…N and no gap or repeat.
@Suite struct SequenceStressTests {
    @Test(arguments: [false, true])
    func threeProcessesOfEightThreadsLogEveryAcknowledgedWriteOnceInOrder(bounded: Bool) throws {
        try withTemporaryDirectory { path throws in
            var environment = ["PD_LOG_RETENTION": "1000000", "PD_LOG_RETENTION_BYTES": "\(1 << 30)"]
            if bounded { environment["PD_DURABILITY"] = "bounded" }
            let children = try (0..<3).map { index in
                try ChildProcess(
                    fixture: ["log-stress", path, "8", "600", "\(index * 7919 + 1)"], environment: environment)
            }
            for child in children {
                #expect(child.waitForExit(timeout: 300) && child.process.terminationStatus == 0, "\(child.text)")
            }
            try Self.check(path: path, bounded: bounded, children: children, inFlight: 0)
        }
    }

    @Test(arguments: [false, true])
    func killedWritersLoseNothingAcknowledgedAndLeaveNoGap(bounded: Bool) throws {
        try withTemporaryDirectory { path throws in
            var environment = ["PD_LOG_RETENTION": "1000000", "PD_LOG_RETENTION_BYTES": "\(1 << 30)"]
            if bounded { environment["PD_DURABILITY"] = "bounded" }
            for round in 0..<3 {
                let children = try (0..<3).map { index in
                    try ChildProcess(
                        fixture: ["log-stress", path, "8", "1000000", "\(round * 31 + index * 7919 + 1)"],
                        environment: environment)
                }
                for child in children { #expect(eventually(timeout: 60) { child.lines.count > 200 + round * 50 }) }
                for child in children { #expect(child.kill()) }
                try Self.check(path: path, bounded: bounded, children: children, inFlight: 8, onlyThese: true)
            }
        }
    }

    static func check(
        path: String, bounded: Bool, children: [ChildProcess], inFlight: Int, onlyThese: Bool = false
    ) throws {
        var acknowledged: Set<String> = []
        var pids: Set<String> = []
        for child in children {
            let pid = child.process.processIdentifier
            pids.insert("\(pid)")
            for line in child.lines {
                if line.hasPrefix("failure") { Issue.record("\(pid): \(line)") }
                let parts = line.split(separator: " ")
                guard parts.first == "ack", parts.count == 4 else { continue }
                let kind = parts[1] == "b" ? "b" : "s"
                acknowledged.insert("\(kind).\(pid).\(parts[2]) \(parts[3])")
            }
        }
        var options = PersistentDefaults.Options()
        options.logRetention = 1_000_000
        options.logRetentionBytes = 1 << 30
        if bounded { options.durability = .bounded(interval: .seconds(10)) }
        let store = try PersistentDefaults(path: path, options: options)
        let records = try store.commits(after: 0)
        #expect(records.map(\.sequence) == Array(1...UInt64(records.count)))
        var seen: [String: Int] = [:]
        var lastByKey: [String: Int] = [:]
        for record in records {
            for change in record.changes {
                let parts = change.key.split(separator: ".")
                guard parts.count == 3, !onlyThese || pids.contains(String(parts[1])) else { continue }
                guard let bytes = change.encodedValue else {
                    Issue.record("removal of \(change.key) at \(record.sequence)")
                    continue
                }
                let value: Int
                switch try StoredValue(encodedValue: bytes) {
                case .int(let number): value = Int(number)
                case .data(let data): value = Int(data.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
                default:
                    Issue.record("unexpected value of \(change.key)")
                    continue
                }
                if value == 0 { continue }  // `tx[key] = tx[key]` of a key not yet stored.
                let id = "\(change.key) \(value)"
                seen[id, default: 0] += 1
                if let last = lastByKey[change.key], last >= value {
                    Issue.record("\(change.key): \(value) after \(last) at \(record.sequence)")
                }
                lastByKey[change.key] = value
            }
        }
        let repeated = seen.filter { $0.value > 1 }
        #expect(repeated.isEmpty, "\(repeated.prefix(10))")
        let missing = acknowledged.subtracting(seen.keys)
        #expect(missing.isEmpty, "\(missing.count) missing: \(missing.prefix(10))")
        let unacknowledged = Set(seen.keys).subtracting(acknowledged)
        #expect(
            unacknowledged.count <= inFlight * children.count, "\(unacknowledged.count): \(unacknowledged.prefix(10))")
        #expect(try store.verify().isEmpty)
        let before = try store.lastSequence()
        try store.set(Int(before) + 1, for: PersistentDefaults.Key<Int>("after", default: 0))
        #expect(try store.lastSequence() == before + 1)
    }
}
