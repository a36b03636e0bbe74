import Foundation
import PDTestSupport
import PersistentDefaults
import Synchronization
import Testing

private struct Abort: Error {}

@Suite struct TransactionTests {
    /// Past a few keys a transaction finds its keys through a table: a key set twice is one
    /// change, a key set back to its value is none, names that differ only in normalisation are
    /// two keys, and the record lists the changes in the order first written.
    @Test func aTransactionOfManyKeysLogsEachChangedKeyOnceInOrder() throws {
        try withTemporaryStore { store, _, _ throws in
            let keys = (0..<40).map { PersistentDefaults.Key<Int>("key-\($0)", default: -1) }
            let nfc = PersistentDefaults.Key<Int>("caf\u{E9}", default: 0)
            let nfd = PersistentDefaults.Key<Int>("cafe\u{301}", default: 0)
            store[keys[3]] = 3
            store[keys[31]] = 31
            try store.write { tx in
                for (index, key) in keys.enumerated() { tx[key] = index }  // key-3 unchanged
                tx[nfc] = 1
                tx[nfd] = 2
                for key in keys[10..<20] { tx[key] += 100 }  // Each a second write of a key.
                tx[keys[30]] = -1  // Back to "absent": still a change (the default is not stored).
                try tx.remove(keys[31])
            }
            let record = try #require(try store.commits(after: 2).first)
            let expectedNames = (0..<40).filter { $0 != 3 }.map { "key-\($0)" } + ["caf\u{E9}", "cafe\u{301}"]
            #expect(record.changedKeys.map { Array($0.utf8) } == expectedNames.map { Array($0.utf8) })
            #expect(store[keys[15]] == 115)
            #expect(store[keys[30]] == -1)
            #expect(try !store.contains(keys[31]))
            #expect(store[nfc] == 1)
            #expect(store[nfd] == 2)
            #expect(try record.changes[14].storedValue() == .int(115))  // key-15, after key-3's gap
            #expect(record.changedKeys[30] == "key-31")
            #expect(record.changes[30].encodedValue == nil)  // Removed.
        }
    }

    /// A transaction past the few keys found by comparing bytes keeps an index of names; it must
    /// find a name written again through another key object, across every growth of the index.
    @Test func aLargeTransactionFindsEachNameAgainThroughOtherKeyObjects() throws {
        try withTemporaryStore { store, _, _ throws in
            let count = 700
            let keys = (0..<count).map { PersistentDefaults.Key<Int>("k\($0)", default: 0) }
            let sameNames = (0..<count).map { PersistentDefaults.Key<Int>("k\($0)", default: 0) }
            // Every tenth name holds 0 before the transaction (stored, not absent).
            try store.write { tx in for index in stride(from: 0, to: count, by: 10) { tx[keys[index]] = 0 } }
            try store.write { tx in
                for (index, key) in keys.enumerated() { tx[key] = index }
                // Every name again, through its twin: a read of the transaction's own write.
                for (index, key) in sameNames.enumerated().reversed() { tx[key] += index }
                // And back to the value before the transaction for every tenth name: no change.
                for index in stride(from: 0, to: count, by: 10) { tx[sameNames[index]] = 0 }
            }
            for index in 0..<count {
                #expect(store[keys[index]] == (index % 10 == 0 ? 0 : 2 * index))
            }
            let record = try #require(try store.commits(after: 1).first)
            let expected = (0..<count).filter { $0 % 10 != 0 }.map { "k\($0)" }
            #expect(record.changedKeys == expected)
            #expect(Set(record.changedKeys).count == record.changedKeys.count)
        }
    }

    /// Each touched key is read and then written through one cursor (`MDB_CURRENT` when it
    /// stands on the key). Random transactions of sets of every size (inline, overflow pages,
    /// shrinking and growing in place), removals, rewrites of one key between writes of others,
    /// and a small map that grows on the way must leave exactly what a plain dictionary says, in
    /// the store, in the transaction's own reads, and in each commit's record.
    @Test(arguments: [UInt64(1), 2, 3])
    func randomTransactionsLeaveWhatAModelSays(seed: UInt64) throws {
        var options = PersistentDefaults.Options()
        options.durability = .bounded(interval: .seconds(60))
        options.initialMapSize = 64 << 10
        try withTemporaryStore(options: options) { store, _, _ throws in
            var random = SplitMix64(seed: seed)
            let keys = (0..<60).map { PersistentDefaults.Key<String>("key-\($0)", default: "") }
            var model: [String: String] = [:]
            for round in 0..<40 {
                var changed: [String: String?] = [:]
                let before = model
                let sequence = try store.lastSequence()
                try store.write { tx in
                    for _ in 0..<Int.random(in: 1...80, using: &random) {
                        let key = keys[Int.random(in: 0..<keys.count, using: &random)]
                        switch Int.random(in: 0..<10, using: &random) {
                        case 0:
                            try tx.remove(key)
                            model[key.name] = nil
                        case 1:
                            // Back to what it was before the transaction: no change to log.
                            if let old = before[key.name] { tx[key] = old } else { try tx.remove(key) }
                            model[key.name] = before[key.name]
                        default:
                            let size = [0, 1, 8, 100, 1_500, 2_100, 5_000][Int.random(in: 0..<7, using: &random)]
                            let letter = Character(UnicodeScalar(97 + round % 26)!)
                            let value =
                                String(repeating: letter, count: size) + "\(Int.random(in: 0..<1_000, using: &random))"
                            tx[key] = value
                            model[key.name] = value
                        }
                        #expect(tx[key] == model[key.name] ?? "")
                    }
                }
                for key in keys where model[key.name] != before[key.name] { changed[key.name] = model[key.name] }
                try store.read { snapshot throws in
                    #expect(try snapshot.keyNames().sorted() == model.keys.sorted())
                    for key in keys { #expect(snapshot[key] == model[key.name] ?? "", "round \(round), \(key.name)") }
                }
                #expect(try store.lastSequence() == (changed.isEmpty ? sequence : sequence + 1), "round \(round)")
                if changed.isEmpty { continue }
                let logged = try #require(try store.commits(after: sequence).first).changes
                #expect(Set(logged.map(\.key)) == Set(changed.keys), "round \(round)")
                for change in logged {
                    let expected = (changed[change.key] ?? nil).map { StoredValue.string($0) }
                    #expect(try change.storedValue() == expected)
                }
            }
            // The writes went through map growth (a put that found the map full was retried).
            #expect(try store.statistics().mapSize > options.initialMapSize)
            #expect(try store.verify().isEmpty)
        }
    }

    @Test func aThrowingWriteLeavesNothingBehind() throws {
        try withTemporaryStore { store, _, _ throws in
            store[.launchCount] = 1
            let sequence = try store.lastSequence()
            #expect(throws: Abort.self) {
                try store.write { tx in
                    tx[.launchCount] = 99
                    tx[.theme] = .dark
                    #expect(tx[.launchCount] == 99)  // the transaction sees its own writes
                    throw Abort()
                }
            }
            #expect(store[.launchCount] == 1)
            #expect(try store.contains(.theme) == false)
            #expect(try store.lastSequence() == sequence)
        }
    }

    @Test func aFailedSubscriptWriteInsideATransactionAbortsIt() throws {
        try withTemporaryStore { store, _, _ throws in
            let bad = PersistentDefaults.Key<Int>("", default: 0)
            #expect(throws: PersistentDefaultsError.invalidKeyName("", reason: "a key name must not be empty")) {
                try store.write { tx in
                    tx[.launchCount] = 5
                    tx[bad] = 1
                }
            }
            #expect(store[.launchCount] == 0)
        }
    }

    @Test func keyNamesTooLongOrEmptyGetAClearError() throws {
        try withTemporaryStore { store, _, _ throws in
            let long = PersistentDefaults.Key<Int>(String(repeating: "é", count: 256), default: 1)
            #expect {
                try store.set(2, for: long)
            } throws: { error in
                guard case PersistentDefaultsError.invalidKeyName(_, let reason) = error else { return false }
                return reason.contains("512 UTF-8 bytes")
            }
            #expect(throws: PersistentDefaultsError.self) { try store.value(for: long) }
            #expect(store[long] == 1)
            let longest = PersistentDefaults.Key<Int>(String(repeating: "a", count: 511), default: 0)
            try store.set(3, for: longest)
            #expect(store[longest] == 3)
            #expect(throws: PersistentDefaultsError.self) { try store.setStoredValue(.int(1), named: "") }
        }
    }

    @Test func aNestedWriteOnTheSameThreadIsRefused() throws {
        try withTemporaryStore { store, _, _ throws in
            #expect(throws: PersistentDefaultsError.nestedWrite) {
                try store.write { _ in try store.set(1, for: .launchCount) }
            }
            #expect(store[.launchCount] == 0)
            // Reading the store inside a write works (another snapshot).
            try store.write { tx in
                tx[.launchCount] = 2
                #expect(store[.launchCount] == 0)
            }
            #expect(store[.launchCount] == 2)
        }
    }

    /// A write inside `read { }` on the same thread commits, but cannot grow the map (that waits
    /// for every read of this process to end, the closure's own included): one that does not fit
    /// throws `mapFull` at once, writes nothing, and fits once the closure has returned.
    @Test func aWriteInsideAReadCommitsButCannotGrowTheMap() throws {
        var options = PersistentDefaults.Options()
        options.initialMapSize = 64 << 10
        try withTemporaryStore(options: options) { store, _, _ throws in
            let blob = PersistentDefaults.Key<Data>("blob", default: Data())
            let big = Data(repeating: 1, count: 8 << 20)
            try store.read { snapshot in
                try store.set(1, for: .launchCount)
                #expect(snapshot[.launchCount] == 0)
                let error = #expect(throws: PersistentDefaultsError.self) { try store.set(big, for: blob) }
                #expect(error?.code == .mapFull)
                #expect(throws: PersistentDefaultsError.self) { try store.write { $0[blob] = big } }
            }
            #expect(store[.launchCount] == 1)
            #expect(try store.value(for: blob).isEmpty)
            try store.set(big, for: blob)
            #expect(try store.value(for: blob) == big)
        }
    }

    @Test func containsKeyNamesAndRemoveAll() throws {
        try withTemporaryStore { store, _, _ throws in
            #expect(try store.keyNames().isEmpty)
            try store.write { tx in
                tx[.launchCount] = 1
                tx[.theme] = .light
                tx[.recent] = ["x"]
            }
            #expect(try store.keyNames() == ["launchCount", "recent", "theme"])
            #expect(try store.contains(.theme))
            #expect(try store.contains(.frame) == false)
            try store.removeAll()
            #expect(try store.keyNames().isEmpty)
            #expect(store[.theme] == .system)
            #expect(try store.commits(after: 1).first?.changes.allSatisfy { $0.encodedValue == nil } == true)
        }
    }

    @Test func aSnapshotNeverSeesATornMultiKeyWrite() async throws {
        try await withTemporaryDirectoryAsync { path in
            var options = PersistentDefaults.Options()
            options.durability = .bounded(interval: .seconds(1))
            let store = try PersistentDefaults(path: path, options: options)
            let a = PersistentDefaults.Key<Int>("a", default: 0)
            let b = PersistentDefaults.Key<Int>("b", default: 0)
            let torn = Counter()
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    for value in 1...2_000 {
                        try? store.write { tx in
                            tx[a] = value
                            tx[b] = value
                        }
                    }
                }
                for _ in 0..<2 {
                    group.addTask {
                        for _ in 0..<2_000 {
                            let (first, second) = (try? store.read { ($0[a], $0[b]) }) ?? (0, 0)
                            if first != second { torn.increment() }
                        }
                    }
                }
            }
            #expect(torn.value == 0)
            #expect(store[a] == 2_000)
        }
    }

    @Test func manyThreadsIncrementingInWriteLoseNoUpdate() async throws {
        try await withTemporaryDirectoryAsync { path in
            var options = PersistentDefaults.Options()
            options.durability = .bounded(interval: .seconds(1))
            let store = try PersistentDefaults(path: path, options: options)
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        for _ in 0..<250 { try? store.write { $0[.launchCount] += 1 } }
                    }
                }
            }
            #expect(store[.launchCount] == 2_000)
            #expect(try store.lastSequence() == 2_000)
        }
    }

    @Test func anObjectEscapingItsClosureIsInvalid() throws {
        try withTemporaryStore { store, _, _ throws in
            store[.launchCount] = 4
            let snapshot = try store.read { $0 }
            #expect(snapshot[.launchCount] == 0)
            #expect(throws: PersistentDefaultsError.usedAfterClosure(type: "Snapshot")) {
                try snapshot.value(for: .launchCount)
            }
            #expect(throws: PersistentDefaultsError.usedAfterClosure(type: "Snapshot")) { try snapshot.keyNames() }
            let transaction = try store.write { $0 }
            #expect(throws: PersistentDefaultsError.usedAfterClosure(type: "WriteTransaction")) {
                try transaction.set(1, for: .launchCount)
            }
            #expect(throws: PersistentDefaultsError.usedAfterClosure(type: "WriteTransaction")) {
                try transaction.value(for: .launchCount)
            }
            #expect(store[.launchCount] == 4)
        }
    }
}

/// A key name is its UTF-8 bytes: names that Swift's `String` equality calls equal (NFC "café"
/// and NFD "cafe\u{301}") but whose bytes differ are different keys everywhere.
@Suite struct KeyNameTests {
    static let composed = "caf\u{E9}"
    static let decomposed = "cafe\u{301}"

    @Test func canonicallyEqualNamesWithDifferentBytesAreDifferentKeys() throws {
        try #require(Self.composed == Self.decomposed)
        try #require(Array(Self.composed.utf8) != Array(Self.decomposed.utf8))
        try withTemporaryStore { store, _, _ throws in
            let composed = PersistentDefaults.Key<Int>(Self.composed, default: 0)
            let decomposed = PersistentDefaults.Key<Int>(Self.decomposed, default: 0)
            try store.write { tx in
                tx[composed] = 1
                tx[decomposed] = 2
            }
            #expect(store[composed] == 1)
            #expect(store[decomposed] == 2)
            let names = try store.keyNames().map { Array($0.utf8) }
            #expect(names == [Array(Self.decomposed.utf8), Array(Self.composed.utf8)])
            let first = try #require(try store.commits(after: 0).first)
            #expect(
                first.changes.map { Array($0.key.utf8) } == [Array(Self.composed.utf8), Array(Self.decomposed.utf8)])
            #expect(try first.changes.map { try $0.storedValue() } == [.int(1), .int(2)])

            // The same value under both names: neither write is skipped.
            try store.write { tx in
                tx[composed] = 5
                tx[decomposed] = 5
            }
            #expect(store[composed] == 5)
            #expect(store[decomposed] == 5)
            let second = try #require(try store.commits(after: first.sequence).first)
            #expect(
                second.changes.map { Array($0.key.utf8) } == [Array(Self.composed.utf8), Array(Self.decomposed.utf8)])

            try store.write { tx in try tx.remove(decomposed) }
            #expect(store[composed] == 5)
            #expect(try store.contains(decomposed) == false)
            #expect(try store.verify().isEmpty)
        }
    }

    @Test func aMigrationCanRenameAKeyToAnotherNormalisation() throws {
        try withTemporaryStore { store, _, _ throws in
            try store.setStoredValue(.string("x"), named: Self.composed)
            try store.migrate(to: 1, "NFC to NFD") { tx in try tx.renameKey(Self.composed, to: Self.decomposed) }
            #expect(try store.keyNames().map { Array($0.utf8) } == [Array(Self.decomposed.utf8)])
            #expect(try store.storedValue(named: Self.decomposed) == .string("x"))
        }
    }

    @Test func recordsEntriesAndReportsTellTheNamesApart() throws {
        #expect(
            CommitRecord.Change(key: Self.composed, encodedValue: nil)
                != CommitRecord.Change(key: Self.decomposed, encodedValue: nil))
        #expect(
            StoredEntry(name: Self.composed, encodedValue: [0]) != StoredEntry(name: Self.decomposed, encodedValue: [0])
        )
        try withTemporaryStore { store, _, log throws in
            try store.setStoredValue(.string("not a number"), named: Self.composed)
            try store.setStoredValue(.string("not a number"), named: Self.decomposed)
            #expect(store[PersistentDefaults.Key<Int>(Self.composed, default: 0)] == 0)
            #expect(store[PersistentDefaults.Key<Int>(Self.decomposed, default: 0)] == 0)
            // Reported once per key: once for each name.
            #expect(log.all.count == 2)
        }
    }
}
