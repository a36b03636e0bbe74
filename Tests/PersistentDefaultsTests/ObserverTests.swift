import Foundation
import PDTestSupport
import PersistentDefaults
import Synchronization
import Testing

private struct Abort: Error {}

@Suite struct ObserverTests {
    @Test func aKeyObserverGetsOldAndNewValueAfterTheCommitOnly() throws {
        try withTemporaryStore { store, _, _ throws in
            let changes = Events<KeyChange<Int>>()
            let token = store.observe(.launchCount) { changes.append($0) }
            store[.launchCount] = 1
            #expect(changes.all.count == 1)  // synchronous: delivered before the set returned
            #expect(throws: Abort.self) {
                try store.write { tx in
                    tx[.launchCount] = 50
                    throw Abort()
                }
            }
            store[.launchCount] = 1  // unchanged
            store[.theme] = .dark  // another key
            try store.write { tx in
                tx[.launchCount] = 2
                tx[.launchCount] = 3  // once per transaction, with the final value
                tx[.recent] = ["x"]
            }
            try store.remove(.launchCount)
            let seen = changes.all.map { [$0.oldValue, $0.newValue, Int($0.sequence)] }
            #expect(seen == [[0, 1, 1], [1, 3, 3], [3, 0, 4]])
            #expect(changes.all.allSatisfy { $0.key == "launchCount" })
            token.cancel()
            store[.launchCount] = 9
            #expect(changes.all.count == 3)
        }
    }

    @Test func aCommitObserverIsCalledOncePerTransactionWithTheChangedKeys() throws {
        try withTemporaryStore { store, _, _ throws in
            let commits = Events<CommitRecord>()
            let token = store.observeCommits { commits.append($0) }
            try store.write { tx in
                tx[.launchCount] = 1
                tx[.theme] = .dark
                tx[.recent] = ["a"]
            }
            try store.write { tx in tx[.launchCount] = 1 }  // nothing changed: no commit record
            #expect(throws: Abort.self) { try store.write { _ in throw Abort() } }
            #expect(commits.all.map(\.changedKeys) == [["launchCount", "theme", "recent"]])
            #expect(commits.all.map(\.sequence) == [1])
            _ = token
        }
    }

    @Test func releasingTheTokenCancels() throws {
        try withTemporaryStore { store, _, _ throws in
            let changes = Events<KeyChange<Int>>()
            var token: ObservationToken? = store.observe(.launchCount) { changes.append($0) }
            store[.launchCount] = 1
            token = nil
            store[.launchCount] = 2
            #expect(changes.all.map(\.newValue) == [1])
            #expect(token == nil)
        }
    }

    @Test func callbacksArriveInCommitOrderExactlyOnceFromManyThreads() async throws {
        try await withTemporaryDirectoryAsync { path in
            var options = PersistentDefaults.Options()
            options.durability = .bounded(interval: .seconds(1))
            let store = try PersistentDefaults(path: path, options: options)
            let sequences = Events<UInt64>()
            let changes = Events<KeyChange<Int>>()
            let commits = store.observeCommits { sequences.append($0.sequence) }
            let keyToken = store.observe(.launchCount) { changes.append($0) }
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<4 {
                    group.addTask { for _ in 0..<100 { try? store.write { $0[.launchCount] += 1 } } }
                }
            }
            #expect(sequences.wait(forCount: 400))
            #expect(sequences.all == Array(1...400))
            #expect(changes.all.map(\.newValue) == Array(1...400))
            #expect(changes.all.allSatisfy { $0.newValue == $0.oldValue + 1 })
            _ = (commits, keyToken)
        }
    }

    @Test func aCallbackMayWriteTheStoreAndItsCommitIsDeliveredAfter() throws {
        try withTemporaryStore { store, _, _ throws in
            let seen = Events<String>()
            let echo = store.observe(.launchCount) { change in
                seen.append("count \(change.newValue)")
                if change.newValue < 3 { store[.launchCount] = change.newValue + 1 }  // writes from the callback
                _ = store[.theme]  // and reads
            }
            let commits = store.observeCommits { seen.append("commit \($0.sequence)") }
            store[.launchCount] = 1
            #expect(store[.launchCount] == 3)
            #expect(seen.all == ["count 1", "commit 1", "count 2", "commit 2", "count 3", "commit 3"])
            _ = (echo, commits)
        }
    }

    @Test func aQueueReceivesTheCallbacksInOrder() throws {
        try withTemporaryStore { store, _, _ throws in
            let queue = DispatchQueue(label: "observer-test")
            let changes = Events<(Int, Bool)>()
            let token = store.observe(.launchCount, queue: queue) { change in
                changes.append((change.newValue, DispatchQueue.getSpecific(key: queueKey) == true))
            }
            queue.setSpecific(key: queueKey, value: true)
            for value in 1...20 { store[.launchCount] = value }
            #expect(changes.wait(forCount: 20))
            #expect(changes.all.map(\.0) == Array(1...20))
            #expect(changes.all.allSatisfy { $0.1 })
            _ = token
        }
    }

    @Test func keyTypesCanBeObserved() throws {
        try withTemporaryStore { store, _, _ throws in
            let changes = Events<KeyChange<Bool>>()
            let token = store.observe(.legacyFlag) { changes.append($0) }
            store[.legacyFlag] = true
            #expect(changes.all.map(\.newValue) == [true])
            _ = token
        }
    }

    @Test func updatesGiveTheCurrentValueThenEachNewOne() async throws {
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            store[.theme] = .light
            var iterator = store.updates(for: .theme).makeAsyncIterator()
            #expect(await iterator.next() == .light)
            store[.theme] = .dark
            #expect(await iterator.next() == .dark)
            store[.launchCount] = 5  // another key: nothing
            store[.theme] = .system
            #expect(await iterator.next() == .system)
        }
    }

    @Test func aSlowUpdatesConsumerSeesTheLatestValueNotABacklog() async throws {
        try await withTemporaryDirectoryAsync { path in
            var options = PersistentDefaults.Options()
            options.durability = .bounded(interval: .seconds(1))
            let store = try PersistentDefaults(path: path, options: options)
            var iterator = store.updates(for: .launchCount).makeAsyncIterator()
            #expect(await iterator.next() == 0)
            for value in 1...1_000 { store[.launchCount] = value }
            #expect(await iterator.next() == 1_000)
        }
    }

    @Test func anUndecodableNewValueIsReportedNotDelivered() throws {
        try withTemporaryStore { store, _, log throws in
            let changes = Events<KeyChange<Int>>()
            let token = store.observe(.launchCount) { changes.append($0) }
            try store.setStoredValue(.string("many"), named: "launchCount")
            store[.launchCount] = 2
            #expect(changes.all.map(\.newValue) == [2])
            #expect(log.all.contains { if case .decodingFailed = $0 { true } else { false } })
            _ = token
        }
    }
}

private let queueKey = DispatchSpecificKey<Bool>()

@Suite struct CrossProcessObserverTests {
    @Test func anotherProcessesCommitsReachThisProcessesObservers() throws {
        try withTemporaryStore { store, path, _ throws in
            let counter = PersistentDefaults.Key<Int>("counter", default: 0)
            let changes = Events<KeyChange<Int>>()
            let commits = Events<CommitRecord>()
            let tokens = [store.observe(counter) { changes.append($0) }, store.observeCommits { commits.append($0) }]
            store[counter] = 10
            #expect(try runFixture(["increment", path, "counter", "3"]).status == 0)
            #expect(changes.wait(forCount: 4))
            #expect(
                changes.all.map { [$0.oldValue, $0.newValue, Int($0.sequence)] } == [
                    [0, 10, 1], [10, 11, 2], [11, 12, 3], [12, 13, 4],
                ])
            #expect(commits.wait(forCount: 4))
            #expect(commits.all.map(\.sequence) == [1, 2, 3, 4])
            #expect(Set(commits.all.dropFirst().map(\.processID)).count == 1)
            #expect(commits.all.last?.processID != getpid())
            _ = tokens
        }
    }

    @Test func prunedRecordsAreReplacedByComparingValues() throws {
        try withTemporaryStore { store, path, _ throws in
            let counter = PersistentDefaults.Key<Int>("counter", default: 0)
            let first = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let changes = Events<KeyChange<Int>>()
            let token = store.observe(counter) { change in
                changes.append(change)
                if change.newValue == 1 {
                    first.signal()
                    release.wait()  // hold the watcher while the other process runs far ahead
                }
            }
            #expect(try runFixture(["increment", path, "counter", "1"]).status == 0)
            #expect(first.wait(timeout: .now() + 10) == .success)
            let result = try runFixture(["increment", path, "counter", "40"], environment: ["PD_LOG_RETENTION": "5"])
            #expect(result.status == 0)
            release.signal()
            // Records 2…36 were pruned: the change across them arrives as one (1 → 37, merged),
            // then the records still in the log, each exactly.
            #expect(changes.wait(forCount: 6))
            #expect(changes.all.map(\.newValue) == [1, 37, 38, 39, 40, 41])
            #expect(changes.all.map(\.oldValue) == [0, 1, 37, 38, 39, 40])
            #expect(changes.all.map(\.sequence) == [1, 37, 38, 39, 40, 41])
            _ = token
        }
    }

    @Test func aWriteThatBypassesTheLogIsNoticedForObservedKeys() throws {
        try withTemporaryStore { store, path, _ throws in
            guard pythonHasLMDB else {
                Issue.record("python3 with the lmdb package is required (tools/setup installs it)")
                return
            }
            let changes = Events<KeyChange<Int>>()
            let token = store.observe(.launchCount) { changes.append($0) }
            store[.launchCount] = 1
            #expect(try setIntBypassingTheLog(path, key: "launchCount", value: 77) == 0)
            #expect(changes.wait(forCount: 2))
            #expect(changes.all.map(\.newValue) == [1, 77])
            #expect(changes.all.last?.oldValue == 1)
            _ = token
        }
    }
}

/// Stores the Int `value` under `key` with Python's `lmdb`, a client that writes no commit-log
/// record and does not know the wake-up channel; returns the script's exit status.
func setIntBypassingTheLog(_ path: String, key: String, value: Int) throws -> Int32 {
    let script = """
        import lmdb, sys
        env = lmdb.open(sys.argv[1], max_dbs=8, subdir=True)
        db = env.open_db(b"values")
        with env.begin(write=True) as txn:
            txn.put(sys.argv[2].encode(), bytes([2]) + int(sys.argv[3]).to_bytes(8, "big"), db=db)
        """
    return try runPython(script, [path, key, String(value)])
}
