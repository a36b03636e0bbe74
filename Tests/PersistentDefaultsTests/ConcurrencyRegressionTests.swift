import Foundation
import PDTestSupport
import PersistentDefaults
import Synchronization
import Testing

/// Regression tests for defects once found in group commit and observer delivery: each ran into the
/// defect before its fix (a failed expectation or a timeout, never a hang of the suite).
@Suite struct ConcurrencyRegressionTests {
    /// Runs `body(thread)` on `count` threads at once and waits for all of them.
    private func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        let group = DispatchGroup()
        for thread in 0..<count {
            group.enter()
            Thread {
                body(thread)
                group.leave()
            }.start()
        }
        group.wait()
    }

    @Test func aBadKeyNameFailsOnlyItsOwnGroupCommittedWrite() throws {
        try withTemporaryStore { store, _, _ throws in  // .sync: group commit
            let failedGoodWrites = Counter()
            let refusedBadWrites = Counter()
            let badNames = ["", String(repeating: "x", count: 600)]
            onThreads(8) { thread in
                if thread < 2 {
                    let bad = PersistentDefaults.Key<Int>(badNames[thread], default: 0)
                    for _ in 0..<60 {
                        do { try store.remove(bad) } catch PersistentDefaultsError.invalidKeyName {
                            refusedBadWrites.increment()
                        } catch {}
                    }
                } else {
                    let key = PersistentDefaults.Key<Int>("good\(thread)", default: -1)
                    for value in 0..<60 {
                        do { try store.set(value, for: key) } catch { failedGoodWrites.increment() }
                    }
                }
            }
            #expect(failedGoodWrites.value == 0)
            #expect(refusedBadWrites.value == 120)
            for thread in 2..<8 {
                #expect(store[PersistentDefaults.Key<Int>("good\(thread)", default: -1)] == 59)
            }
        }
    }

    @Test func anObserverThatWaitsForAnotherThreadsDurableSetDoesNotDeadlock() throws {
        try withTemporaryStore { store, _, _ throws in  // .sync: the leader used to keep the lead
            let other = PersistentDefaults.Key<Int>("other", default: 0)
            let waits = Events<DispatchTimeoutResult>()
            let seen = Events<Int>()
            let token = store.observe(.launchCount) { change in
                let done = DispatchSemaphore(value: 0)
                Thread {
                    try? store.set(change.newValue, for: other)
                    done.signal()
                }.start()
                waits.append(done.wait(timeout: .now() + 5))
            }
            let otherToken = store.observe(other) { seen.append($0.newValue) }
            onThreads(4) { thread in
                for round in 0..<3 { try? store.set(thread * 10 + round + 1, for: .launchCount) }
            }
            // Sets of one key in one batch are one change: at least one callback, each of which
            // got its answer (before the fix each waited out its timeout: the leader kept the lead).
            #expect(!waits.all.isEmpty)
            #expect(waits.all.allSatisfy { $0 == .success })
            #expect(seen.wait(forCount: 1))
            _ = (token, otherToken)
        }
    }

    @Test func anObserverRegisteredWhileOthersCommitMissesNoCommit() async throws {
        try await withTemporaryDirectoryAsync { path in
            let store = try boundedStore(at: path)
            let total = 3_000
            let finished = DispatchSemaphore(value: 0)
            Thread {
                for _ in 0..<total { try? store.write { $0[.launchCount] += 1 } }
                finished.signal()
            }.start()
            // Observers registered at random moments while the writer runs: each sees an unbroken
            // chain of +1 changes from its start, ending at the final value.
            var chains: [Events<KeyChange<Int>>] = []
            var tokens: [ObservationToken] = []
            var streams: [AsyncStream<Int>] = []
            for index in 0..<150 {
                let chain = Events<KeyChange<Int>>()
                chains.append(chain)
                tokens.append(store.observe(.launchCount) { chain.append($0) })
                if index.isMultiple(of: 3) { streams.append(store.updates(for: .launchCount)) }
                await Task.yield()
            }
            #expect(finished.wait(timeout: .now() + 120) == .success)
            for chain in chains {
                // From its first change's old value up to the total, one change per commit.
                #expect(chain.wait(forCount: total - (chain.all.first?.oldValue ?? total), timeout: 5))
            }
            for chain in chains {
                let changes = chain.all
                #expect(changes.last.map { $0.newValue == total } ?? true)
                #expect(zip(changes, changes.dropFirst()).allSatisfy { $0.newValue == $1.oldValue })
                #expect(changes.allSatisfy { $0.newValue == $0.oldValue + 1 && $0.sequence == UInt64($0.newValue) })
            }
            for stream in streams {
                #expect(await firstValue(in: stream, timeout: 10) { $0 == total })
            }
            _ = tokens
        }
    }

    /// A commit of keys nobody in this process observes is passed without a delivery (one lock
    /// section). Under writers of observed and unobserved keys, with observers of both kinds
    /// registered and cancelled meanwhile, no observer misses or repeats a change.
    @Test func commitsPassedForNobodyHideNothingFromObserversRegisteredMeanwhile() async throws {
        try await withTemporaryDirectoryAsync { path in
            let store = try boundedStore(at: path)
            let total = 1_000
            let keys = (0..<4).map { PersistentDefaults.Key<Int>("contended-\($0)", default: 0) }
            // Key 0 is observed from the start, key 3 only by a prefix observer; keys 1 and 2 by
            // key observers registered later, and prefixes nobody writes by prefix observers.
            let first = Events<KeyChange<Int>>()
            let prefixed = Events<CommitRecord>()
            var tokens = [store.observe(keys[0]) { first.append($0) }]
            tokens.append(store.observe(prefix: "contended-3") { prefixed.append($0) })
            let finished = DispatchGroup()
            for key in keys {
                finished.enter()
                Thread {
                    for _ in 0..<total { try? store.write { $0[key] += 1 } }
                    finished.leave()
                }.start()
            }
            var chains: [(key: Int, events: Events<KeyChange<Int>>)] = []
            for index in 0..<120 {
                let key = index % 3
                let events = Events<KeyChange<Int>>()
                chains.append((key, events))
                tokens.append(store.observe(keys[key]) { events.append($0) })
                // Observers that come and go: the registry changes between passed commits.
                store.observe(keys[(index + 1) % 3]) { _ in }.cancel()
                tokens.append(store.observe(prefix: "elsewhere.\(index).") { _ in Issue.record("nothing is there") })
                await Task.yield()
            }
            #expect(finished.wait(timeout: .now() + 120) == .success)
            #expect(first.wait(forCount: total, timeout: 10))
            #expect(first.all.map(\.newValue) == Array(1...total))
            #expect(prefixed.wait(forCount: total, timeout: 10))
            #expect(prefixed.all.map(\.changedKeys) == Array(repeating: ["contended-3"], count: total))
            #expect(try prefixed.all.map { try $0.changes[0].storedValue() } == (1...total).map { .int(Int64($0)) })
            for (key, events) in chains {
                #expect(events.wait(forCount: total - (events.all.first?.oldValue ?? total), timeout: 10))
                let changes = events.all
                #expect(changes.last.map { $0.newValue == total } ?? true, "key \(key)")
                #expect(changes.allSatisfy { $0.newValue == $0.oldValue + 1 }, "key \(key)")
                #expect(zip(changes, changes.dropFirst()).allSatisfy { $0.newValue == $1.oldValue }, "key \(key)")
            }
            _ = tokens
        }
    }

    @Test func aFirstObserverRegisteredDuringACommitSeesIt() async throws {
        try await withTemporaryDirectoryAsync { path in
            let store = try boundedStore(at: path)
            var stuck = 0
            for round in 1...150 {
                // The registry is empty each round; a commit races with the registration.
                let go = DispatchSemaphore(value: 0)
                let committed = DispatchSemaphore(value: 0)
                Thread {
                    go.wait()
                    store[.launchCount] = round
                    committed.signal()
                }.start()
                go.signal()
                let stream = store.updates(for: .launchCount)
                committed.wait()
                if !(await firstValue(in: stream, timeout: 5) { $0 == round }) { stuck += 1 }
            }
            #expect(stuck == 0)
        }
    }

    @Test func registeringAndCancellingFromManyThreadsLeavesDeliveryAndTheWatcherWorking() throws {
        try withTemporaryStore { store, path, _ throws in
            onThreads(6) { thread in
                for round in 0..<200 {
                    let token = store.observe(.launchCount) { _ in }
                    if thread == 0, round.isMultiple(of: 10) { store[.launchCount] += 1 }
                    token.cancel()
                }
            }
            let changes = Events<KeyChange<Int>>()
            let token = store.observe(.launchCount) { changes.append($0) }
            // Another process's commit reaches this process only through the watcher.
            #expect(try runFixture(["increment", path, "launchCount", "1"]).status == 0)
            #expect(changes.wait(forCount: 1))
            #expect(changes.all.first.map { $0.newValue == $0.oldValue + 1 } == true)
            _ = token
        }
    }

    @Test func aDamagedLogRecordIsReportedOnceAndObserversKeepGoing() throws {
        try withTemporaryStore { store, path, errors throws in
            guard pythonHasLMDB else {
                Issue.record("python3 with the lmdb package is required (tools/setup installs it)")
                return
            }
            let changes = Events<KeyChange<Int>>()
            let token = store.observe(.launchCount) { changes.append($0) }
            let refused = store.observe(PersistentDefaults.Key<Int>("", default: 0)) { _ in }
            store[.launchCount] = 1
            // Another client appends a damaged record 2 and sets the value behind the log's back.
            let script = """
                import lmdb, sys
                env = lmdb.open(sys.argv[1], max_dbs=8, subdir=True)
                log = env.open_db(b"log")
                values = env.open_db(b"values")
                with env.begin(write=True) as txn:
                    txn.put((2).to_bytes(8, "big"), b"\\x01garbage", db=log)
                    txn.put(b"launchCount", bytes([2]) + (5).to_bytes(8, "big"), db=values)
                """
            #expect(try runPython(script, [path]) == 0)
            #expect(changes.wait(forCount: 2))  // the unlogged change, found by comparing
            for value in 6...8 { store[.launchCount] = value }
            #expect(changes.wait(forCount: 5))
            #expect(changes.all.map(\.newValue) == [1, 5, 6, 7, 8])
            #expect(changes.all.map(\.oldValue) == [0, 1, 5, 6, 7])
            let corrupt = errors.all.filter {
                if case .corruptLogRecord = $0 { return true } else { return false }
            }
            #expect(corrupt.count == 1)
            #expect(
                errors.all.contains {
                    if case .invalidKeyName = $0 { return true } else { return false }
                })
            _ = (token, refused)
        }
    }

    @Test func aCallbackThatClosesAndOpensStoresAndCancelsItsTokenDoesNotDeadlock() throws {
        try withTemporaryDirectory { path in
            let otherPath = path + "-other"
            defer { try? FileManager.default.removeItem(atPath: otherPath) }
            let done = Events<Bool>()
            let holder = Guarded<ObservationToken?>(nil)
            do {
                let store = try PersistentDefaults(path: path)
                holder.withLock { token in
                    token = store.observe(.launchCount) { _ in
                        // On the watcher thread: opens and closes another store, cancels itself.
                        let other = try? PersistentDefaults(path: otherPath)
                        other?[.launchCount] = 1
                        holder.withLock { $0 }?.cancel()
                        done.append(true)
                    }
                }
                #expect(try runFixture(["increment", path, "launchCount", "1"]).status == 0)
                #expect(done.wait(forCount: 1))
            }
            // The last handle is gone: the store closes while its watcher may still be running.
            holder.withLock { $0 = nil }
            let reopened = try PersistentDefaults(path: path)
            #expect(reopened[.launchCount] == 1)
        }
    }

    @Test func cancellingWhileTheCallbackWaitsForTheCancellingThreadDoesNotDeadlock() throws {
        try withTemporaryStore { store, path, _ throws in
            let entered = DispatchSemaphore(value: 0)
            let proceed = DispatchSemaphore(value: 0)
            let finished = Events<Bool>()
            let token = store.observe(.launchCount) { _ in
                entered.signal()
                // Waits for the thread that cancels (as a hop to the main queue would).
                finished.append(proceed.wait(timeout: .now() + 5) == .success)
            }
            // Another process's commit: delivered on the watcher thread.
            #expect(try runFixture(["increment", path, "launchCount", "1"]).status == 0)
            #expect(entered.wait(timeout: .now() + 10) == .success)
            token.cancel()  // used to join the watcher thread, which waited for this thread
            proceed.signal()
            #expect(finished.wait(forCount: 1))
            #expect(finished.all == [true])
        }
    }

    @Test func observersOfNamesThatDifferOnlyInNormalisationAreApart() throws {
        try withTemporaryStore { store, _, _ throws in
            let composed = PersistentDefaults.Key<Int>("caf\u{E9}", default: 0)
            let decomposed = PersistentDefaults.Key<Int>("cafe\u{301}", default: 0)
            #expect(composed.name == decomposed.name)  // String equality: equal; bytes: not
            let composedChanges = Events<KeyChange<Int>>()
            let decomposedChanges = Events<KeyChange<Int>>()
            let tokens = [
                store.observe(composed) { composedChanges.append($0) },
                store.observe(decomposed) { decomposedChanges.append($0) },
            ]
            try store.write { tx in
                tx[composed] = 1
                tx[decomposed] = 2
            }
            store[decomposed] = 3
            #expect(composedChanges.all.map { [$0.oldValue, $0.newValue] } == [[0, 1]])
            #expect(decomposedChanges.all.map { [$0.oldValue, $0.newValue] } == [[0, 2], [2, 3]])
            _ = tokens
        }
    }

    @Test func aKeptSnapshotOrTransactionThrowsAfterTheStoreIsReleased() throws {
        try withTemporaryDirectory { path in
            var keptSnapshot: Snapshot?
            var keptTransaction: WriteTransaction?
            do {
                let store = try PersistentDefaults(path: path)
                store[.launchCount] = 3
                try store.read { keptSnapshot = $0 }
                try store.write { keptTransaction = $0 }
            }
            #expect(throws: PersistentDefaultsError.usedAfterClosure(type: "Snapshot")) {
                try keptSnapshot?.value(for: .launchCount)
            }
            #expect(keptSnapshot?[.launchCount] == 0)
            #expect(throws: PersistentDefaultsError.usedAfterClosure(type: "WriteTransaction")) {
                try keptTransaction?.set(1, for: .launchCount)
            }
        }
    }

    @Test func openStandardThrowsWhereStandardWouldStandIn() throws {
        try withTemporaryDirectory { path in
            try Data("not a directory".utf8).write(to: URL(fileURLWithPath: path))
            let result = try runFixture(["open-standard"], environment: ["PERSISTENT_DEFAULTS_PATH": path])
            #expect(result.status == 3)
            #expect(result.output.contains("not a directory") || result.output.contains("notAStore"))
            #expect(try String(contentsOfFile: path, encoding: .utf8) == "not a directory")
        }
    }
}

/// Whether `stream` yields a value that satisfies `predicate` within `timeout` seconds.
func firstValue<Value: Sendable>(
    in stream: AsyncStream<Value>, timeout: Double, where predicate: @escaping @Sendable (Value) -> Bool
) async -> Bool {
    await withTaskGroup(of: Bool.self) { group in
        group.addTask {
            for await value in stream where predicate(value) { return true }
            return false
        }
        group.addTask {
            try? await Task.sleep(for: .seconds(timeout))  // a timeout, not synchronisation
            return false
        }
        let first = await group.next() ?? false
        group.cancelAll()
        return first
    }
}
