import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// A write transaction appends `Int`, `Int64`, `UInt64` and `Double` values itself instead of
/// calling the key's codec: the bytes must be the codec's, and transactions sized from the
/// previous one (a large one, then small ones) must keep every key.
@Suite("Transactions: values encoded in place")
struct TransactionEncodingTests {
    @Test func fixedWidthValuesWrittenInATransactionAreStoredAsSetStoresThem() throws {
        try withTemporaryStore { store, _, log throws in
            let ints: [Int] = [0, 1, -1, .min, .max, 1 << 40]
            let int64s: [Int64] = [0, -7, .min, .max]
            let uint64s: [UInt64] = [0, 7, .max, 1 << 63]
            let doubles: [Double] = [0, -0.0, 1.5, -.infinity, .greatestFiniteMagnitude, .leastNonzeroMagnitude]
            func check<Value: Codable & Sendable & Equatable>(_ values: [Value], _ type: String) throws {
                for (index, value) in values.enumerated() {
                    let inTransaction = PersistentDefaults.Key<Value>("t-\(type)-\(index)", default: values[0])
                    let bySet = PersistentDefaults.Key<Value>("s-\(type)-\(index)", default: values[0])
                    try store.write { $0[inTransaction] = value }
                    try store.set(value, for: bySet)
                    #expect(try store.storedValue(named: inTransaction.name) == store.storedValue(named: bySet.name))
                    #expect(store[inTransaction] == value)
                }
            }
            try check(ints, "int")
            try check(int64s, "int64")
            try check(uint64s, "uint64")
            try check(doubles, "double")
            let nan = PersistentDefaults.Key<Double>("nan", default: 0)
            try store.write { $0[nan] = .nan }
            #expect(store[nan].isNaN)
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// After a transaction of 3,000 keys, the next ones grow their tables to that size at once;
    /// a small one and another large one must still find, write and log every key.
    @Test func transactionsSizedFromALargerOneKeepEveryKey() throws {
        try withTemporaryStore { store, _, log throws in
            let keys = (0..<3_000).map { PersistentDefaults.Key<Int>("k\($0)", default: -1) }
            let records = Guarded<[Int]>([])
            let delivered = DispatchSemaphore(value: 0)
            let observer = store.observeCommits { record in
                records.withLock { $0.append(record.changes.count) }
                delivered.signal()
            }
            defer { observer.cancel() }
            try store.write { tx in for (index, key) in keys.enumerated() { tx[key] = index } }
            try store.write { tx in for key in keys.prefix(20) { tx[key] = tx[key] + 1 } }
            try store.write { tx in
                for (index, key) in keys.enumerated().reversed() { tx[key] = index * 2 }
                for key in keys.prefix(5) { tx[key] = 7 }  // touched twice
            }
            for (index, key) in keys.enumerated() { #expect(store[key] == (index < 5 ? 7 : index * 2)) }
            for _ in 0..<3 { #expect(delivered.wait(timeout: .now() + 10) == .success) }
            #expect(records.withLock { $0 } == [3_000, 20, 3_000])
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }
}
