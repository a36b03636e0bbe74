import Foundation
import PersistentDefaults
import Testing

/// What a write transaction logs is what differs from before it, whatever the sequence of writes
/// of each key: every path that gives a key a new value keeps the key's "changed" state right
/// (`WriteTransaction` no longer compares the old and new bytes when it finishes).
@Suite("Transactions: the logged changes after many writes of a key")
struct TransactionChangeTrackingTests {
    /// The keys and new values of the store's newest record, when it is newer than `sequence`.
    private static func loggedAfter(_ sequence: UInt64, in store: PersistentDefaults) throws -> [String: StoredValue?]?
    {
        guard let record = try store.commits(after: sequence).last else { return nil }
        var changes: [String: StoredValue?] = [:]
        for change in record.changes { changes[change.key] = try change.storedValue() }
        return changes
    }

    /// Writes in one transaction for `keyCount` keys (the name index is used past 8): per key
    /// `k`, a sequence of writes chosen by `k % 8`, and what the record must say of it.
    private static func check(keyCount: Int) throws {
        try withTemporaryStore { store, _, log in
            let large = Data(repeating: 7, count: 10_000)
            try store.write { tx in
                for k in 0..<keyCount {
                    try tx.setStoredValue(.int(Int64(k)), named: "k\(k)")
                    try tx.setStoredValue(.data(large), named: "big\(k)")
                }
            }
            let start = try store.lastSequence()
            var expected: [String: StoredValue?] = [:]
            try store.write { tx in
                for k in 0..<keyCount {
                    let name = "k\(k)"
                    let key = PersistentDefaults.Key<Int>(name, default: -1)
                    switch k % 8 {
                    case 0:  // Changed and set back: no change.
                        tx[key] = 1_000
                        tx[key] = k
                    case 1:  // Removed, written, removed: removed.
                        try tx.remove(key)
                        tx[key] = 5
                        try tx.remove(key)
                        expected[name] = .some(nil)
                    case 2:  // Removed and written back: no change.
                        try tx.remove(key)
                        try tx.setStoredValue(.int(Int64(k)), named: name)
                    case 3:  // Written, removed, written: the last value.
                        tx[key] = 7
                        try tx.remove(key)
                        tx[key] = 8
                        expected[name] = .int(8)
                    case 4:  // The same value: no change.
                        tx[key] = k
                    case 5:  // A large value and back.
                        try tx.setStoredValue(.data(Data(repeating: 1, count: 9_000)), named: name)
                        tx[key] = k
                    case 6:  // Back to a large value it held: no change; then another large one.
                        try tx.setStoredValue(.data(Data(repeating: 2, count: 9_000)), named: "big\(k)")
                        try tx.setStoredValue(.data(large), named: "big\(k)")
                        try tx.setStoredValue(.data(Data(repeating: 3, count: 9_000)), named: "big\(k)")
                        expected["big\(k)"] = .data(Data(repeating: 3, count: 9_000))
                    default:  // A key not stored before: written and removed, no change.
                        tx[PersistentDefaults.Key<Int>("new\(k)", default: 0)] = 3
                        try tx.remove(PersistentDefaults.Key<Int>("new\(k)", default: 0))
                        tx[key] = k
                    }
                }
            }
            let logged = try loggedAfter(start, in: store)
            if expected.isEmpty {
                #expect(logged == nil, "\(logged ?? [:])")
            } else {
                #expect(logged == expected)
            }
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    @Test func aFewKeys() throws { try Self.check(keyCount: 8) }

    @Test func manyKeys() throws { try Self.check(keyCount: 40) }

    @Test func aTransactionWhoseWritesCancelOutLogsNothing() throws {
        try withTemporaryStore { store, _, _ in
            store[PersistentDefaults.Key<Int>("a", default: 0)] = 1
            let start = try store.lastSequence()
            try store.write { tx in
                for _ in 0..<3 {
                    try tx.removeAll()
                    try tx.setStoredValue(.int(1), named: "a")
                }
            }
            #expect(try store.lastSequence() == start)
        }
    }

    /// Equal values whose bytes may differ (the JSON of a set): the held bytes are kept, so a
    /// transaction that changes the key and sets an equal value back changes nothing.
    @Test func anEqualSetWrittenBackLogsNothing() throws {
        try withTemporaryStore { store, _, log in
            let key = PersistentDefaults.Key<Set<Int>>("set", default: [])
            let original = Set(0..<40)
            store[key] = original
            let start = try store.lastSequence()
            try store.write { tx in
                tx[key] = [1]
                tx[key] = Set(original.reversed())
            }
            try store.write { tx in tx[key] = Set(Array(original).shuffled()) }
            #expect(try store.lastSequence() == start)
            try store.write { tx in
                tx[key] = [2]
                tx[key] = original
                tx[key] = [2]
            }
            #expect(try Self.loggedAfter(start, in: store)?.keys.sorted() == ["set"])
            #expect(store[key] == [2])
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }
}
