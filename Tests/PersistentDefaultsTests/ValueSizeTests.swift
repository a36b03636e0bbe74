import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// `Options.maxValueSize`: a larger value is refused with a typed error, and nothing is written.
@Suite struct ValueSizeTests {
    static func options(limit: Int, durability: PersistentDefaults.Durability = .sync) -> PersistentDefaults.Options {
        var options = PersistentDefaults.Options()
        options.maxValueSize = limit
        options.durability = durability
        return options
    }

    static func isTooLarge(_ error: any Error, key: String, size: Int, limit: Int) -> Bool {
        error as? PersistentDefaultsError == .valueTooLarge(key: key, size: size, limit: limit)
    }

    @Test func theDefaultIs64MiBAndAdmitsTensOfMegabytes() throws {
        #expect(PersistentDefaults.Options().maxValueSize == 64 << 20)
        try withTemporaryStore { store, _, _ throws in
            let blob = PersistentDefaults.Key<Data>("blob", default: Data())
            let large = Data(repeating: 7, count: 24 << 20)
            try store.set(large, for: blob)
            #expect(try store.value(for: blob).count == 24 << 20)
        }
    }

    @Test func aValueOverTheLimitIsRefusedNamingKeySizeAndLimitAndNothingIsWritten() throws {
        try withTemporaryStore(options: Self.options(limit: 100)) { store, path, log throws in
            let blob = PersistentDefaults.Key<Data>("blob", default: Data())
            try store.set(Data(repeating: 1, count: 99), for: blob)  // 1 tag byte + 99 = the limit: admitted
            let before = fileBytes(path + "/data.mdb")
            #expect {
                try store.set(Data(repeating: 2, count: 100), for: blob)
            } throws: { Self.isTooLarge($0, key: "blob", size: 101, limit: 100) }
            let message = PersistentDefaultsError.valueTooLarge(key: "blob", size: 101, limit: 100).description
            #expect(
                message == "value of key \"blob\" is 101 bytes, over the limit of 100 bytes (Options.maxValueSize); "
                    + "nothing was written")
            #expect(try store.value(for: blob) == Data(repeating: 1, count: 99))
            #expect(try store.lastSequence() == 1)
            #expect(fileBytes(path + "/data.mdb") == before, "nothing was written")
            // The non-throwing subscript reports it and keeps the old value.
            store[blob] = Data(repeating: 3, count: 200)
            #expect(store[blob].count == 99)
            #expect(log.all.contains { Self.isTooLarge($0, key: "blob", size: 201, limit: 100) })
            // Untyped writes are bounded too.
            #expect {
                try store.setStoredValue(.string(String(repeating: "x", count: 100)), named: "text")
            } throws: { Self.isTooLarge($0, key: "text", size: 101, limit: 100) }
        }
    }

    @Test func inAWriteTheWholeTransactionThrows() throws {
        try withTemporaryStore(options: Self.options(limit: 64)) { store, _, _ throws in
            let note = PersistentDefaults.Key<String>("note", default: "")
            #expect {
                try store.write { tx in
                    tx[.launchCount] = 5
                    try tx.set(String(repeating: "n", count: 64), for: note)
                }
            } throws: { Self.isTooLarge($0, key: "note", size: 65, limit: 64) }
            // Through the non-throwing subscript the transaction throws the same at its end.
            #expect {
                try store.write { tx in
                    tx[note] = String(repeating: "n", count: 80)
                    tx[.launchCount] = 6
                }
            } throws: { Self.isTooLarge($0, key: "note", size: 81, limit: 64) }
            #expect(store[.launchCount] == 0)
            #expect(try store.keyNames().isEmpty)
            #expect(try store.lastSequence() == 0)
        }
    }

    @Test func aTooLargeValueFailsOnlyItsOwnRequestOfAGroupCommit() throws {
        try withTemporaryStore(options: Self.options(limit: 32)) { store, _, _ throws in
            let failures = Counter()
            DispatchQueue.concurrentPerform(iterations: 8) { index in
                let key = PersistentDefaults.Key<String>("k\(index)", default: "")
                let value = index.isMultiple(of: 2) ? "small \(index)" : String(repeating: "L", count: 40)
                do {
                    try store.set(value, for: key)
                } catch let error as PersistentDefaultsError {
                    if case .valueTooLarge(key: "k\(index)", size: 41, limit: 32) = error { failures.increment() }
                } catch {}
            }
            #expect(failures.value == 4)
            #expect(try store.keyNames() == ["k0", "k2", "k4", "k6"])
            #expect(try store.verify().isEmpty)
        }
    }

    @Test func aLimitBelowOneIsOne() throws {
        _ = try withTemporaryStore(options: Self.options(limit: 0)) { store, _, _ throws in
            #expect {
                try store.set(true, for: PersistentDefaults.Key<Bool>("flag", default: false))
            } throws: { Self.isTooLarge($0, key: "flag", size: 2, limit: 1) }
        }
    }
}
