import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

@Suite struct PrefixObserverTests {
    private let maxConnections = PersistentDefaults.Key<Int>("fleet.maxConnections", default: 100)
    private let banner = PersistentDefaults.Key<String>("fleet.banner", default: "")
    private let local = PersistentDefaults.Key<Int>("local.retries", default: 3)

    @Test func aPrefixObserverGetsOnlyTheChangesUnderItsPrefixOncePerCommit() throws {
        try withTemporaryStore { store, _, _ throws in
            let records = Events<CommitRecord>()
            let token = store.observe(prefix: "fleet.") { records.append($0) }
            try store.write { tx in
                tx[maxConnections] = 200
                tx[local] = 5
                tx[banner] = "hello"
            }
            store[local] = 6  // no key under the prefix: no call
            store[maxConnections] = 200  // unchanged: no commit
            try store.remove(banner)
            #expect(records.all.map(\.sequence) == [1, 3])
            #expect(records.all.map(\.changedKeys) == [["fleet.maxConnections", "fleet.banner"], ["fleet.banner"]])
            #expect(records.all.last?.changes.first?.encodedValue == nil)
            token.cancel()
            store[maxConnections] = 1
            #expect(records.all.count == 2)
        }
    }

    @Test func prefixesAreComparedAsBytesAndTheEmptyPrefixSeesEverything() throws {
        try withTemporaryStore { store, _, errors throws in
            let composed = Events<CommitRecord>()
            let everything = Events<CommitRecord>()
            let tokens = [
                store.observe(prefix: "caf\u{E9}") { composed.append($0) },
                store.observe(prefix: "") { everything.append($0) },
                store.observe(prefix: String(repeating: "p", count: 600)) { _ in },
            ]
            store[PersistentDefaults.Key<Int>("cafe\u{301}.x", default: 0)] = 1  // NFD: another name
            store[PersistentDefaults.Key<Int>("caf\u{E9}.x", default: 0)] = 2
            #expect(composed.all.map(\.sequence) == [2])
            #expect(everything.all.map(\.sequence) == [1, 2])
            #expect(
                errors.all.contains {
                    if case .invalidKeyName = $0 { return true } else { return false }
                })
            _ = tokens
        }
    }

    @Test func anotherProcessesCommitsReachPrefixObservers() throws {
        try withTemporaryStore { store, path, _ throws in
            let records = Events<CommitRecord>()
            let token = store.observe(prefix: "fleet.") { records.append($0) }
            #expect(try runFixture(["increment", path, "fleet.counter", "3"]).status == 0)
            #expect(try runFixture(["increment", path, "other", "1"]).status == 0)
            store[maxConnections] = 7
            #expect(records.wait(forCount: 4))
            #expect(records.all.map(\.sequence) == [1, 2, 3, 5])
            #expect(records.all.prefix(3).allSatisfy { $0.processID != getpid() })
            _ = token
        }
    }

    @Test func theAsyncSequenceLosesNoRecord() async throws {
        try await withTemporaryDirectoryAsync { path in
            let store = try boundedStore(at: path)
            let counter = PersistentDefaults.Key<Int>("fleet.counter", default: 0)
            let stream = store.updates(prefix: "fleet.")
            let total = 2_000
            Thread {
                for value in 1...total {
                    store[counter] = value
                    store[local] = value  // interleaved commits outside the prefix
                }
            }.start()
            var seen: [Int] = []
            for await record in stream {
                let value = try record.changes.first?.storedValue()
                if case .int(let number) = value { seen.append(Int(number)) }
                if seen.count == total { break }
            }
            #expect(seen == Array(1...total))
        }
    }

    @Test func aConsumerThatFallsTooFarBehindSeesTheSequenceEndNotAGap() async throws {
        try await withTemporaryDirectoryAsync { path in
            let store = try boundedStore(at: path)
            let counter = PersistentDefaults.Key<Int>("fleet.counter", default: 0)
            let stream = store.updates(prefix: "fleet.", bufferLimit: 5)
            for value in 1...10 { store[counter] = value }
            var sequences: [UInt64] = []
            for await record in stream { sequences.append(record.sequence) }  // ends by itself
            #expect(sequences == [1, 2, 3, 4, 5])
            // The consumer resumes from the log.
            #expect(try store.commits(after: 5).map(\.sequence) == Array(6...10))
        }
    }

    /// The usage shown for observing a group of keys, as a user writes it.
    @Test func groupObservationAsUsersWriteIt() async throws {
        let store = try PersistentDefaults.temporary()
        let seen = Events<UInt64>()
        // A CommitRecord holding only the changes under the prefix.
        let token = store.observe(prefix: "fleet.") { record in
            for change in record.changes {
                print(record.sequence, change.key, change.encodedValue == nil ? "removed" : "set")
            }
            seen.append(record.sequence)
        }
        let updates = store.updates(prefix: "fleet.")
        store[PersistentDefaults.Key<Int>("fleet.maxConnections", default: 100)] = 200
        for await record in updates {  // AsyncSequence form, same records
            #expect(record.changedKeys == ["fleet.maxConnections"])
            break
        }
        #expect(seen.all == [1])
        token.cancel()
    }
}
