import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

@Suite struct CommitLogTests {
    /// A write transaction logs its changes straight in their log form, from one buffer of
    /// values, and its record decodes them when first asked — or, when it wrote a value larger
    /// than 4 KiB, as values holding their arrays. Either way, what a commit observer of the
    /// committing process gets must be what the log holds, for every kind of value (fixed-width,
    /// booleans, strings, JSON, removals, a value set back, names past the linear search).
    @Test(arguments: [false, true])
    func theCommittingProcessGetsTheRecordTheLogHolds(withALargeValue: Bool) throws {
        try withTemporaryStore { store, _, log throws in
            let before = PersistentDefaults.Key<Int>("set-back", default: 0)
            let gone = PersistentDefaults.Key<String>("gone", default: "")
            try store.write { tx in
                tx[before] = 1
                tx[gone] = "here"
            }
            let commits = Events<CommitRecord>()
            let token = store.observeCommits { commits.append($0) }
            // 6,001 bytes encoded: a large value; 21 bytes: a small one.
            let text = String(repeating: "é", count: withALargeValue ? 3_000 : 10)
            try store.write { tx in
                for index in 0..<40 { tx[PersistentDefaults.Key<Int>("int-\(index)", default: 0)] = index - 20 }
                tx[PersistentDefaults.Key<String>("text", default: "")] = text
                tx[PersistentDefaults.Key<Bool>("flag", default: false)] = true
                tx[PersistentDefaults.Key<Double>("ratio", default: 0)] = 0.5
                tx[PersistentDefaults.Key<Date>("when", default: .distantPast)] = Date(
                    timeIntervalSinceReferenceDate: 12)
                tx[.frame] = WindowFrame(x: 1, y: 2, title: "Main")
                try tx.remove(gone)
                tx[before] = 2
                tx[before] = 1  // Back to what it was: no change.
                tx[PersistentDefaults.Key<Int>("int-3", default: 0)] = 33  // Written again, after others.
            }
            let delivered = try #require(commits.all.last)
            let logged = try #require(try store.commits(after: 0).last)
            #expect(delivered == logged)
            #expect(delivered.sequence == 2)
            let changes = Dictionary(uniqueKeysWithValues: delivered.changes.map { ($0.key, $0) })
            #expect(delivered.changes.count == 40 + 6)
            #expect(changes["set-back"] == nil)
            #expect(try changes["int-3"]?.storedValue() == .int(33))
            #expect(try changes["int-0"]?.storedValue() == .int(-20))
            #expect(try changes["text"]?.storedValue() == .string(text))
            #expect(try changes["flag"]?.storedValue() == .bool(true))
            #expect(try changes["ratio"]?.storedValue() == .double(0.5))
            #expect(try changes["when"]?.storedValue() == .date(Date(timeIntervalSinceReferenceDate: 12)))
            #expect(changes["gone"].map { $0.encodedValue == nil } == true)
            #expect(delivered.changedKeys.prefix(3) == ["int-0", "int-1", "int-2"])
            #expect(store[.frame] == WindowFrame(x: 1, y: 2, title: "Main"))
            // Setting the large value again is no change either.
            try store.write { tx in tx[PersistentDefaults.Key<String>("text", default: "")] = text }
            #expect(commits.all.count == 1)
            #expect(try store.verify().isEmpty)
            #expect(log.all.isEmpty)
            _ = token
        }
    }

    @Test func theLogIsBoundedInBytesSoLargeValuesDoNotPileUpInTheFile() throws {
        try withTemporaryStore { store, path, log throws in
            #expect(PersistentDefaults.Options().logRetentionBytes == 4 << 20)
            let blob = PersistentDefaults.Key<Data>("blob", default: Data())
            for index in 0..<300 {
                try store.set(Data(repeating: UInt8(truncatingIfNeeded: index), count: 1 << 20), for: blob)
            }
            let statistics = try store.statistics()
            #expect(statistics.dataFileSize < 16 << 20, "data.mdb is \(statistics.dataFileSize) bytes")
            let logBytes =
                statistics.log.pageSize
                * (statistics.log.leafPages + statistics.log.branchPages + statistics.log.overflowPages)
            #expect(logBytes <= (4 << 20) + (4 << 20) / 16)  // The bound plus the pruning slack.
            let records = try store.commits(after: 0)
            // The newest records, contiguous, ending at the last commit; as many as fit.
            #expect(records.map(\.sequence) == Array(UInt64(301 - records.count)...300))
            #expect((2...4).contains(records.count), "\(records.count) records kept")
            #expect(statistics.log.entries == records.count)
            #expect(statistics.logRange == UInt64(301 - records.count)...300)
            #expect(try records.last?.changes.first?.storedValue() == .data(Data(repeating: 43, count: 1 << 20)))
            // A reader that persisted sequence 10 sees that records after it were pruned.
            let resumed = try store.commits(after: 10)
            #expect(resumed.first?.sequence == statistics.logRange?.lowerBound)
            #expect(try #require(statistics.logRange).lowerBound > 11)
            #expect(try store.verify().isEmpty)
            #expect(log.all.isEmpty)
        }
    }

    @Test func theNewestRecordIsKeptEvenWhenItAloneExceedsTheByteBound() throws {
        var options = PersistentDefaults.Options()
        options.logRetentionBytes = 1_000
        try withTemporaryStore(options: options) { store, _, _ throws in
            store[.launchCount] = 1
            store[.launchCount] = 2
            #expect(try store.commits(after: 0).map(\.sequence) == [2])  // small records: one page
            try store.set(
                Data(repeating: 1, count: 64 << 10), for: PersistentDefaults.Key<Data>("big", default: Data()))
            #expect(try store.commits(after: 0).map(\.sequence) == [3])
            #expect(try store.lastSequence() == 3)
        }
    }

    @Test func everyWriteTransactionAppendsOneRecordWithItsChanges() throws {
        try withTemporaryStore { store, _, _ throws in
            let before = Date().addingTimeInterval(-1)
            try store.write { tx in
                tx[.launchCount] = 1
                tx[.theme] = .dark
            }
            try store.remove(.theme)
            let records = try store.commits(after: 0)
            #expect(records.map(\.sequence) == [1, 2])
            #expect(records[0].changedKeys == ["launchCount", "theme"])
            #expect(try records[0].changes[1].storedValue() == .string("dark"))
            #expect(records[1].changes == [CommitRecord.Change(key: "theme", encodedValue: nil)])
            #expect(records.allSatisfy { $0.processID == getpid() })
            #expect(records.allSatisfy { $0.timestamp > before && $0.timestamp < Date().addingTimeInterval(1) })
            #expect(try store.commits(after: 1).map(\.sequence) == [2])
            #expect(try store.commits(after: 2).isEmpty)
            #expect(try store.commits(after: .max).isEmpty)
            #expect(try store.commits(after: 0, limit: 1).map(\.sequence) == [1])
        }
    }

    @Test func unchangedValuesAndNoOpTransactionsAreNotLogged() throws {
        try withTemporaryStore { store, _, _ throws in
            store[.launchCount] = 5
            store[.launchCount] = 5
            try store.write { tx in
                tx[.launchCount] = 6
                tx[.launchCount] = 5  // back to where it was: no change
            }
            try store.write { _ in }
            try store.remove(.frame)  // was never stored
            #expect(try store.lastSequence() == 1)
            try store.write { tx in
                tx[.launchCount] = 6
                tx[.theme] = .system  // the Key<T> style stores even the default: a change
            }
            #expect(try store.commits(after: 1).first?.changedKeys == ["launchCount", "theme"])
        }
    }

    /// Whether two values encode to different JSON, as the store's encoder writes it.
    private func jsonDiffers<Value: Encodable>(_ first: Value, _ second: Value) throws -> Bool {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(first) != encoder.encode(second)
    }

    /// Sets `first`, then `equal` (the same value, built another way) through `set`, the
    /// subscript, and a transaction that changes the key and changes it back; only the first set
    /// may log a commit and call the observer.
    private func expectEqualValueIsNoChange<Value: Codable & Equatable & Sendable>(
        _ first: Value, _ equal: Value, other: Value, default defaultValue: Value, in store: PersistentDefaults
    ) throws {
        try #require(first == equal)
        let key = PersistentDefaults.Key<Value>("k-\(UUID().uuidString)", default: defaultValue)
        let changes = Events<KeyChange<Value>>()
        let token = store.observe(key) { changes.append($0) }
        try store.set(first, for: key)
        let sequence = try store.lastSequence()
        try store.set(equal, for: key)
        store[key] = equal
        try store.write { tx in
            tx[key] = other
            tx[key] = equal
        }
        try store.write { tx in tx[key] = equal }
        #expect(try store.lastSequence() == sequence, "\(Value.self): an equal value was logged as a change")
        #expect(changes.all.count == 1, "\(Value.self): observer calls \(changes.all.count)")
        #expect(changes.all.allSatisfy { $0.oldValue != $0.newValue })
        #expect(try store.value(for: key) == first)
        try store.set(other, for: key)
        #expect(try store.lastSequence() == sequence + 1)
        #expect(changes.all.map(\.newValue) == [first, other], "\(Value.self): wrong observer calls")
        token.cancel()
    }

    @Test func settingAnEqualSetOrNonStringKeyedDictionaryIsNoChange() throws {
        try withTemporaryStore { store, _, _ throws in
            let elements = (0..<200).map { "element-\($0)" }
            var bigger = Set<String>(minimumCapacity: 8192)
            bigger.formUnion(elements.reversed())
            // What made the bug: equal sets whose JSON differs (Set has no element order).
            try #require(try jsonDiffers(Set(elements), bigger))
            try expectEqualValueIsNoChange(Set(elements), bigger, other: ["x"], default: [], in: store)
            let optional: Set<String>? = bigger
            try expectEqualValueIsNoChange(Set(elements), optional, other: nil, default: [], in: store)

            let pairs = (0..<300).map { ($0, "value \($0)") }
            var dictionary = [Int: String](minimumCapacity: 8192)
            for (key, value) in pairs.reversed() { dictionary[key] = value }
            try expectEqualValueIsNoChange(
                Dictionary(uniqueKeysWithValues: pairs), dictionary, other: [:], default: [:], in: store)

            let uuids = (0..<100).map { _ in UUID() }
            var byUUID = [UUID: Int](minimumCapacity: 4096)
            for (index, uuid) in uuids.enumerated().reversed() { byUUID[uuid] = index }
            // Keys that are neither String nor Int make a JSON array in no fixed order.
            try #require(try jsonDiffers(Dictionary(uniqueKeysWithValues: zip(uuids, 0...)), byUUID))
            try expectEqualValueIsNoChange(
                Dictionary(uniqueKeysWithValues: zip(uuids, 0...)), byUUID, other: [:], default: [:], in: store)
        }
    }

    /// Log keys another tool may write: the largest 8-byte key (its sequence + 1 overflowed),
    /// one past the largest sequence that converts to `Int`, and a key that is not 8 bytes
    /// (it sorted last, read as sequence 0, and the next commit overwrote record 1).
    static let foreignLogKeys: [[UInt8]] = [
        [UInt8](repeating: 0xFF, count: 8), [0x80] + [UInt8](repeating: 0, count: 7), [1, 2, 3],
    ]

    @Test(arguments: foreignLogKeys)
    func aForeignLogKeyGivesATypedErrorInsteadOfATrap(foreignKey: [UInt8]) throws {
        try withTemporaryDirectory { path throws in
            do {
                let store = try PersistentDefaults(path: path)
                store[.launchCount] = 1
            }
            try rawLMDBPut(path, [RawLMDBEntry(database: "log", key: foreignKey, value: [0x66, 0x6F])])
            let log = ErrorLog()
            var options = PersistentDefaults.Options()
            options.errorHandler = { log.append($0) }
            let store = try PersistentDefaults(path: path, options: options)
            func isCorruptLog(_ error: any Error) -> Bool {
                if case PersistentDefaultsError.corruptLogRecord = error { true } else { false }
            }
            #expect(performing: { try store.set(2, for: .launchCount) }, throws: isCorruptLog)
            #expect(performing: { try store.write { $0[.theme] = .dark } }, throws: isCorruptLog)
            #expect(performing: { try store.remove(.launchCount) }, throws: isCorruptLog)
            store[.launchCount] = 3  // reported, not applied
            #expect(log.all.count == 1)
            #expect(log.all.allSatisfy(isCorruptLog))
            // Reads still work, and nothing was written.
            #expect(store[.launchCount] == 1)
            #expect(try store.value(for: .theme) == .system)
            #expect(performing: { try store.lastSequence() }, throws: isCorruptLog)
            #expect(performing: { try store.commits(after: 0) }, throws: isCorruptLog)
            #expect(try store.commits(after: 0, limit: 1).map(\.sequence) == [1])
            let problems = try store.verify()
            #expect(problems.count == 1, "\(problems)")
            #expect(problems.first?.contains("log key") == true, "\(problems)")
            let statistics = try store.statistics()
            #expect(statistics.log.entries == 2)
            #expect(statistics.logRange?.lowerBound == 1)
        }
    }

    @Test func retentionKeepsTheNewestRecords() throws {
        var options = PersistentDefaults.Options()
        options.logRetention = 5
        options.durability = .bounded(interval: .seconds(5))
        try withTemporaryStore(options: options) { store, _, _ throws in
            for value in 1...12 { store[.launchCount] = value }
            let records = try store.commits(after: 0)
            #expect(records.map(\.sequence) == Array(8...12))
            #expect(try store.lastSequence() == 12)
            #expect(try store.statistics().logRange == 8...12)
            #expect(try store.verify().isEmpty)
        }
    }

    /// Past the retention the log is pruned in batches: a commit whose sequence is a multiple of
    /// the slack (1/16 of the retention, at most 64) prunes back to exactly the retention, and the
    /// commits in between prune nothing.
    @Test func theLogIsPrunedInBatchesOfTheSlack() throws {
        var options = PersistentDefaults.Options()
        options.logRetention = 160  // slack 10
        options.durability = .bounded(interval: .seconds(5))
        try withTemporaryStore(options: options) { store, _, _ throws in
            var counts: [Int] = []
            for value in 1...215 {
                store[.launchCount] = value
                counts.append(try store.statistics().log.entries)
            }
            let expected = (1...215).map { $0 <= 160 ? $0 : 160 + $0 % 10 }
            #expect(counts == expected)
            let records = try store.commits(after: 0)
            #expect(records.map(\.sequence) == Array(51...215))
            #expect(try store.verify().isEmpty)
        }
    }

    @Test func theByteBoundIsKeptWithinItsSlack() throws {
        var options = PersistentDefaults.Options()
        options.logRetentionBytes = 64 << 10
        options.durability = .bounded(interval: .seconds(5))
        try withTemporaryStore(options: options) { store, _, _ throws in
            let blob = PersistentDefaults.Key<Data>("blob", default: Data())
            var pruned = false
            for index in 0..<60 {
                try store.set(Data(repeating: UInt8(index), count: 6_000), for: blob)
                let log = try store.statistics().log
                let bytes = log.pageSize * (log.leafPages + log.branchPages + log.overflowPages)
                #expect(bytes <= (64 << 10) + (64 << 10) / 16, "after set \(index): \(bytes) bytes")
                #expect(log.entries >= 1)
                if log.entries < index + 1 { pruned = true }
            }
            #expect(pruned)
            #expect(try store.commits(after: 0).last?.sequence == 60)
        }
    }

    /// A write transaction takes the last sequence from this process's previous commit only when
    /// no commit came in between: a commit by another process between two of ours must not be
    /// overwritten by a reused sequence number.
    @Test func anotherProcessesCommitBetweenTwoOfOursKeepsItsSequence() throws {
        try withTemporaryStore { store, path, _ throws in
            store[.launchCount] = 1
            #expect(try runFixture(["increment", path, "counter", "1"]).status == 0)
            store[.launchCount] = 2
            #expect(try runFixture(["increment", path, "counter", "1"]).status == 0)
            #expect(try runFixture(["increment", path, "counter", "1"]).status == 0)
            store[.launchCount] = 3
            store[.launchCount] = 4
            let records = try store.commits(after: 0)
            #expect(records.map(\.sequence) == Array(1...7))
            #expect(
                records.map(\.changedKeys) == [
                    ["launchCount"], ["counter"], ["launchCount"], ["counter"], ["counter"], ["launchCount"],
                    ["launchCount"],
                ])
            #expect(records.map { $0.processID == getpid() } == [true, false, true, false, false, true, true])
            #expect(try store.verify().isEmpty)
        }
    }

    /// Threads of this process and another process commit at once: every commit gets its own
    /// sequence, the log is contiguous, and each record holds the key its writer set (the last
    /// sequence is taken from this process's previous commit only when no other came between).
    @Test func concurrentWritersOfTwoProcessesGetContiguousDistinctSequences() async throws {
        var options = PersistentDefaults.Options()
        options.durability = .bounded(interval: .seconds(5))
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path, options: options)
            async let other = Task.detached { try runFixture(["increment", path, "counter", "150"]) }.value
            let threads = 4
            let perThread = 150
            let done = DispatchGroup()
            for thread in 0..<threads {
                done.enter()
                Thread {
                    let key = PersistentDefaults.Key<Int>("thread-\(thread)", default: 0)
                    for value in 1...perThread { store[key] = value }
                    done.leave()
                }.start()
            }
            #expect(done.wait(timeout: .now() + 120) == .success)
            let result = try await other
            #expect(result.status == 0, "\(result.output)")
            let total = threads * perThread + 150
            let records = try store.commits(after: 0)
            #expect(records.map(\.sequence) == Array(1...UInt64(total)))
            #expect(
                records.filter { $0.processID != getpid() }.map(\.changedKeys)
                    == Array(repeating: ["counter"], count: 150))
            for thread in 0..<threads {
                let values = try records.filter { $0.changedKeys == ["thread-\(thread)"] }
                    .map { try $0.changes[0].storedValue() }
                #expect(values == (1...perThread).map { StoredValue.int(Int64($0)) })
            }
            #expect(try store.verify().isEmpty)
        }
    }

    @Test func sequenceNumbersKeepGrowingAcrossReopens() throws {
        try withTemporaryDirectory { path throws in
            do {
                let store = try PersistentDefaults(path: path)
                store[.launchCount] = 1
                store[.launchCount] = 2
            }
            let store = try PersistentDefaults(path: path)
            store[.launchCount] = 3
            #expect(try store.commits(after: 0).map(\.sequence) == [1, 2, 3])
        }
    }

    @Test func theLogAgreesWithTheData() throws {
        try withTemporaryStore { store, _, _ throws in
            for round in 0..<20 {
                try store.write { tx in
                    tx[.launchCount] = round
                    if round.isMultiple(of: 3) { try tx.remove(.recent) } else { tx[.recent] = ["\(round)"] }
                }
            }
            #expect(try store.verify().isEmpty)
            // Replaying the log from the start reproduces the data.
            var replayed: [String: [UInt8]] = [:]
            for record in try store.commits(after: 0) {
                for change in record.changes { replayed[change.key] = change.encodedValue }
            }
            for name in try store.keyNames() {
                #expect(try replayed[name].map { try StoredValue(encodedValue: $0) } == store.storedValue(named: name))
            }
        }
    }
}
