import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The inspection API as applications use it: reader slots, copies, opening only existing stores,
/// encoded values.
@Suite("Inspection: reader slots, copies, opening without creating")
struct InspectionTests {
    @Test func theReaderTableListsThisProcesssSnapshotWithItsTransactionID() throws {
        let store = try PersistentDefaults.temporary()
        store[.launchCount] = 1
        let last = try store.statistics().lastTransactionID
        let pid = getpid()
        let during = try store.read { _ in store.readerTableEntries() }.filter { $0.processID == pid }
        let table = store.readerTable()
        #expect(during.contains { $0.transactionID == last }, "\(table)")
        #expect(during.allSatisfy { $0.thread != 0 })
        // After the read, this process's slots are idle: kept for the next read, no snapshot.
        let after = store.readerTableEntries().filter { $0.processID == pid }
        #expect(!after.isEmpty)
        #expect(after.allSatisfy { $0.transactionID == nil }, "\(table)")
    }

    @Test func aCopyHasMode0600AndTheStoresValues() throws {
        try withTemporaryStore { store, path, _ throws in
            store[.launchCount] = 7
            let destination = path + "-copy"
            defer { try? FileManager.default.removeItem(atPath: destination) }
            try FileManager.default.createDirectory(atPath: destination, withIntermediateDirectories: false)
            try store.copy(to: destination, compact: true)
            var info = stat()
            #expect(stat(destination + "/data.mdb", &info) == 0)
            // LMDB's mdb_env_copy2 would give 0666 less the umask (0644 under the usual 022).
            #expect(info.st_mode & 0o777 == 0o600)
            var options = PersistentDefaults.Options()
            options.readOnly = true
            #expect(try PersistentDefaults(path: destination, options: options).value(for: .launchCount) == 7)
        }
    }

    /// Another process grew the map since this process last read: the copy's own read
    /// transaction meets `MDB_MAP_RESIZED`, and the copy adopts the larger map as reads do.
    @Test(arguments: [false, true])
    func aCopyAfterAnotherProcessGrewTheMapHoldsEveryValue(compact: Bool) throws {
        try withTemporaryStore { store, path, log throws in
            store[.launchCount] = 7
            try growTheMapFromAnotherProcess(path)
            let destination = path + "-copy"
            defer { try? FileManager.default.removeItem(atPath: destination) }
            try FileManager.default.createDirectory(atPath: destination, withIntermediateDirectories: false)
            try store.copy(to: destination, compact: compact)
            var options = PersistentDefaults.Options()
            options.readOnly = true
            let copy = try PersistentDefaults(path: destination, options: options)
            #expect(try copy.value(for: .launchCount) == 7)
            #expect(try copy.value(for: PersistentDefaults.Key<Data>("blob", default: Data())).count == 4 << 20)
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    @Test func aCopyOverAnExistingFileFailsAndLeavesItAlone() throws {
        try withTemporaryStore { store, path, _ throws in
            let destination = path + "-copy"
            defer { try? FileManager.default.removeItem(atPath: destination) }
            try FileManager.default.createDirectory(atPath: destination, withIntermediateDirectories: false)
            let existing = Data("keep me".utf8)
            try existing.write(to: URL(fileURLWithPath: destination + "/data.mdb"))
            let error = #expect(throws: PersistentDefaultsError.self) {
                try store.copy(to: destination, compact: false)
            }
            #expect(error?.code == LMDBResultCode(rawValue: EEXIST))
            #expect(FileManager.default.contents(atPath: destination + "/data.mdb") == existing)
        }
    }

    @Test func withoutCreateIfMissingAWritableOpenOfAMissingStoreCreatesNothing() throws {
        try withTemporaryDirectory { path in
            var options = PersistentDefaults.Options()
            options.createIfMissing = false
            let missing = #expect(throws: PersistentDefaultsError.self) {
                try PersistentDefaults(path: path, options: options)
            }
            #expect(missing == .notAStore(path: path, reason: "no such directory"))
            #expect(!FileManager.default.fileExists(atPath: path), "no directory was created")

            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            #expect(throws: PersistentDefaultsError.self) { try PersistentDefaults(path: path, options: options) }
            #expect(try FileManager.default.contentsOfDirectory(atPath: path).isEmpty, "no store was created")

            do { try PersistentDefaults(path: path).set(5, for: .launchCount) }
            let store = try PersistentDefaults(path: path, options: options)
            try store.set(6, for: .launchCount)
            #expect(try store.value(for: .launchCount) == 6)
        }
    }

    @Test func readOnlyNeverCreatesWhateverCreateIfMissingSays() throws {
        try withTemporaryDirectory { path in
            var options = PersistentDefaults.Options()
            options.readOnly = true
            options.createIfMissing = true
            #expect(throws: PersistentDefaultsError.self) { try PersistentDefaults(path: path, options: options) }
            #expect(!FileManager.default.fileExists(atPath: path))
        }
    }

    @Test func aTemporaryStoreIgnoresCreateIfMissing() throws {
        var options = PersistentDefaults.Options()
        options.createIfMissing = false
        let store = try PersistentDefaults.temporary(options: options)
        store[.launchCount] = 2
        #expect(try store.value(for: .launchCount) == 2)
    }

    /// The fixed-width encodings at their edges: sign bit, all bits, a double's exponent bits and
    /// a date's seconds since 2001, each the tag then the payload's 8 bytes in big-endian order.
    @Test(arguments: [
        (StoredValue.int(.min), [0x02, 0x80, 0, 0, 0, 0, 0, 0, 0] as [UInt8]),
        (.int(-1), [0x02] + Array(repeating: 0xFF, count: 8)),
        (.int(0), [0x02] + Array(repeating: 0, count: 8)),
        (.uint(.max), [0x03] + Array(repeating: 0xFF, count: 8)),
        (.uint(0x0102_0304_0506_0708), [0x03, 1, 2, 3, 4, 5, 6, 7, 8]),
        (.double(1), [0x04, 0x3F, 0xF0, 0, 0, 0, 0, 0, 0]),
        (.double(-.infinity), [0x04, 0xFF, 0xF0, 0, 0, 0, 0, 0, 0]),
        (.date(Date(timeIntervalSinceReferenceDate: 0.5)), [0x0B, 0x3F, 0xE0, 0, 0, 0, 0, 0, 0]),
    ])
    func fixedWidthValuesEncodeAsTagAndBigEndianPayload(value: StoredValue, encoded: [UInt8]) throws {
        #expect(value.encodedValue == encoded)
        #expect(try StoredValue(encodedValue: encoded) == value)
    }

    /// A `json` value whose text is not JSON (another client wrote it): `verify()` found no
    /// problem (`pdinspect check`: "ok", exit 0), while `pdinspect keys` and `dump` list it as
    /// `invalid` and `export` refuses it because it "does not decode". Declared as `json`, it is
    /// one problem, not two.
    @Test func verifyReportsAJSONValueWhoseTextIsNotJSON() throws {
        try withTemporaryStore { store, _, _ throws in
            try store.declare(.frame)
            try store.setStoredValue(.json("{not json"), named: "loose")
            try store.setStoredValue(.json("[1, 2"), named: "frame")
            try store.setStoredValue(.json(" [1, {\"a\": null}] "), named: "fine")
            let problems = try store.verify()
            #expect(problems.count == 2, "\(problems)")
            #expect(problems.contains { $0.hasPrefix("value of \"loose\": ") && $0.contains("JSON") }, "\(problems)")
            #expect(problems.contains { $0.hasPrefix("value of \"frame\": ") && $0.contains("JSON") }, "\(problems)")
            try store.remove(.frame)
            try store.setStoredValue(.json("{}"), named: "loose")
            #expect(try store.verify().isEmpty)
        }
    }

    @Test func anEncodedValueIsTheTagThenTheBigEndianPayload() throws {
        let encoded: [UInt8] = [0x02, 0, 0, 0, 0, 0, 0, 0x01, 0x2C]
        #expect(StoredValue.int(300).encodedValue == encoded)
        #expect(try StoredValue(encodedValue: encoded) == .int(300))
        #expect(throws: StoredValueError.self) { try StoredValue(encodedValue: Array(encoded.dropLast())) }
        try withTemporaryStore { store, _, _ throws in
            try store.setStoredValue(.int(300), named: "n")
            #expect(try store.storedEntries() == [StoredEntry(name: "n", encodedValue: encoded)])
            #expect(try store.commits(after: 0).last?.changes.first?.encodedValue == encoded)
        }
    }

    @Test func theBigEndianReaderReadsMostSignificantByteFirst() {
        #expect(UInt32(bigEndianBytes: [0x01, 0x02, 0x03, 0x04]) == 0x0102_0304)
        #expect(UInt64(bigEndianBytes: [0xFF, 0, 0, 0, 0, 0, 0, 0x01]) == 0xFF00_0000_0000_0001)
        #expect(UInt16(bigEndianBytes: [0xAB, 0xCD]) == 0xABCD)
        #expect(UInt8(bigEndianBytes: [0x7F]) == 0x7F)
        #expect(UInt64(bigEndianBytes: []) == 0)
    }
}
