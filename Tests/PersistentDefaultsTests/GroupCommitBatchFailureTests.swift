import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

@Suite struct GroupCommitBatchFailureTests {
    /// A batch whose requests include sets of keys a mirror owns: those fail alone with
    /// `ownedByMirror`, the others commit with consecutive sequences, each value once, in order.
    @Test func aMirrorOwnedSetInABatchFailsAloneAndTheOthersGetConsecutiveSequences() throws {
        try withTemporaryStore { store, _, _ throws in
            try store.core.write { writer in
                writer.logsWithoutValueChanges = true
                try store.core.recordMirror(
                    MirrorRecord(etcdPrefix: "/f/", endpoints: []), localPrefix: Array("fleet.".utf8),
                    in: try writer.live())
            }
            let start = try store.lastSequence()
            let threads = 8
            let rounds = 60
            let errors = Guarded<[String]>([])
            let group = DispatchGroup()
            for thread in 0..<threads {
                group.enter()
                Thread {
                    defer { group.leave() }
                    for round in 1...rounds {
                        let owned = (thread + round) % 3 == 0
                        let key = PersistentDefaults.Key<Int>(owned ? "fleet.\(thread)" : "t\(thread)", default: 0)
                        do {
                            try store.set(round, for: key)
                            if owned { errors.withLock { $0.append("owned \(thread) \(round) succeeded") } }
                        } catch PersistentDefaultsError.ownedByMirror {
                            if !owned { errors.withLock { $0.append("\(thread) \(round) refused") } }
                        } catch {
                            errors.withLock { $0.append("\(thread) \(round): \(error)") }
                        }
                    }
                }.start()
            }
            #expect(group.wait(timeout: .now() + 120) == .success)
            #expect(errors.withLock { $0 }.isEmpty, "\(errors.withLock { $0.prefix(10) })")
            let records = try store.commits(after: start)
            #expect(records.map(\.sequence) == Array((start + 1)...(start + UInt64(records.count))))
            var values: [String: [Int64]] = [:]
            for record in records {
                for change in record.changes {
                    #expect(!change.key.hasPrefix("fleet."))
                    if case .int(let value) = try change.storedValue() { values[change.key, default: []].append(value) }
                }
            }
            for thread in 0..<threads {
                let expected = (1...rounds).filter { (thread + $0) % 3 != 0 }.map(Int64.init)
                #expect(values["t\(thread)"] == expected)
            }
            #expect(try store.verify().isEmpty)
        }
    }
}
