import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

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

    /// This process's delivery held up by a slow observer while #3…#5 are committed, the log
    /// keeping only the newest: the stream, which "loses no record" and ends instead of giving a
    /// gap, was handed #5 after #2, as if #3 and #4 (both under its prefix) never existed.
    @Test func aStreamWhoseDeliveryFellBehindThePrunedLogEndsInsteadOfSkippingRecords() async throws {
        try await withTemporaryDirectoryAsync { path in
            var options = PersistentDefaults.Options()
            options.logRetention = 1
            options.durability = .bounded(interval: .seconds(10))
            let store = try PersistentDefaults(path: path, options: options)
            let key = PersistentDefaults.Key<Int>("fleet.counter", default: 0)
            let stream = store.updates(prefix: "fleet.")
            store[key] = 1
            try holdingDelivery(of: key, at: 2, committing: 2, in: store) {
                for value in 3...5 { store[key] = value }  // Each prunes all but the newest.
            }
            store[key] = 6  // After the gap too: the loop below ends with or without the defect.
            var sequences: [UInt64] = []
            for await record in stream {
                sequences.append(record.sequence)
                if record.sequence == 6 { break }
            }
            #expect(sequences == [1, 2], "records after the gap were handed over")
        }
    }

    /// Streams read while this process's threads and another process increment a counter in
    /// every commit, with a log of 4 records and an observer that now and then holds delivery up,
    /// so that records are pruned before this process reads them. Each consumer asks for a new
    /// stream whenever one ends: each stream hands over an unbroken run of increments (it ends at
    /// a gap, never skips one), and ended streams leave no observer behind.
    @Test func streamsEndAtGapsAndNeverSkipUnderContention() async throws {
        try await withTemporaryDirectoryAsync { path in
            var options = PersistentDefaults.Options()
            options.logRetention = 4
            options.durability = .bounded(interval: .seconds(10))
            options.fallbackCheckInterval = .milliseconds(20)
            let store = try PersistentDefaults(path: path, options: options)
            let counter = PersistentDefaults.Key<Int>("counter", default: 0)
            let mirror = PersistentDefaults.Key<Int>("mirror", default: 0)
            let slow = store.observe(counter) { change in
                if change.newValue % 50 == 0 { usleep(2_000) }  // Load, not synchronisation.
            }
            defer { slow.cancel() }
            let (threads, count) = (2, 300)
            let total = 2 * threads * count  // This process's threads and the other process's.
            let child = try ChildProcess(
                fixture: ["hammer", path, "\(threads)", "\(count)"],
                environment: ["PD_LOG_RETENTION": "4", "PD_DURABILITY": "bounded"])
            let writers = DispatchGroup()
            for _ in 0..<threads {
                writers.enter()
                Thread.detachNewThread {
                    for _ in 0..<count {
                        try? store.write { transaction in
                            transaction[counter] += 1
                            transaction[mirror] = transaction[counter]
                        }
                    }
                    writers.leave()
                }
            }
            var runs: [[Int]] = []
            await withTaskGroup(of: [[Int]].self) { group in
                for _ in 0..<4 {
                    group.addTask {
                        var runs: [[Int]] = []
                        while (try? store.value(for: counter)) != total {
                            let stream = store.updates(prefix: "")
                            // No commit may follow: this stream would wait for ever.
                            if (try? store.value(for: counter)) == total { break }
                            var values: [Int] = []
                            for await record in stream {
                                let change = record.changes.first { $0.key == "counter" }
                                guard case .int(let value)? = try? change?.storedValue() else { continue }
                                values.append(Int(value))
                                if value == total { break }
                            }
                            runs.append(values)
                        }
                        return runs
                    }
                }
                for await found in group { runs += found }
            }
            writers.wait()
            #expect(child.waitForExit() && child.process.terminationStatus == 0, "\(child.text)")
            for values in runs {
                let gaps = zip(values, values.dropFirst()).filter { $1 != $0 + 1 }
                #expect(gaps.isEmpty, "a stream skipped increments: \(gaps.prefix(5))")
            }
            #expect(try store.value(for: counter) == total)
            // Only the slow observer is left: ended streams cancelled theirs.
            #expect(eventually(timeout: 5) { store.core.observers.observerCount == 1 })
            print("streams: \(runs.count), records: \(runs.map(\.count).reduce(0, +))")
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
