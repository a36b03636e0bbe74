import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

private enum Level: Int, Codable, Sendable {
    case low = 1
    case high = 2
}
private enum Mode: String, Sendable { case fast, safe }  // RawRepresentable, not Codable
private struct Nested: Codable, Equatable, Sendable {
    var name: String
    var tags: [String]
    var created: Date
    var payload: Data
}

/// Writes `value` through a fresh key, reads it back and returns what was stored on disk.
private func roundTrip<Value: Codable & Equatable & Sendable>(
    _ value: Value, default defaultValue: Value, in store: PersistentDefaults
) throws -> StoredValue? {
    let key = PersistentDefaults.Key<Value>("k-\(UUID().uuidString)", default: defaultValue)
    #expect(try store.value(for: key) == defaultValue)
    try store.set(value, for: key)
    #expect(try store.value(for: key) == value)
    #expect(store[key] == value)
    return try store.storedValue(named: key.name)
}

@Suite struct ValueTests {
    @Test func primitivesAreStoredWithTheirOwnTags() throws {
        try withTemporaryStore { store, _, _ throws in
            #expect(try roundTrip(true, default: false, in: store) == .bool(true))
            #expect(try roundTrip(-42, default: 0, in: store) == .int(-42))
            #expect(try roundTrip(Int8.min, default: 0, in: store) == .int(-128))
            #expect(try roundTrip(Int16.max, default: 0, in: store) == .int(32767))
            #expect(try roundTrip(Int32.min, default: 0, in: store) == .int(Int64(Int32.min)))
            #expect(try roundTrip(Int64.max, default: 0, in: store) == .int(.max))
            #expect(try roundTrip(UInt64.max, default: 0, in: store) == .uint(.max))
            #expect(try roundTrip(UInt8(200), default: 0, in: store) == .uint(200))
            #expect(try roundTrip(UInt(7), default: 0, in: store) == .uint(7))
            #expect(try roundTrip(3.25, default: 0.0, in: store) == .double(3.25))
            #expect(try roundTrip(Float(1.5), default: 0, in: store) == .double(1.5))
            #expect(try roundTrip("héllo ✓", default: "", in: store) == .string("héllo ✓"))
            #expect(try roundTrip(Data([0, 1, 255]), default: Data(), in: store) == .data(Data([0, 1, 255])))
            let date = Date(timeIntervalSince1970: 1_700_000_000.25)
            #expect(try roundTrip(date, default: .distantPast, in: store) == .date(date))
            let url = try #require(URL(string: "https://example.com/a?b=c"))
            #expect(try roundTrip(url, default: URL(fileURLWithPath: "/"), in: store) == .url(url))
            let uuid = UUID()
            #expect(try roundTrip(uuid, default: UUID(), in: store) == .uuid(uuid))
        }
    }

    @Test func collectionsAndCodableValuesAreStoredAsSortedJSON() throws {
        try withTemporaryStore { store, _, _ throws in
            #expect(try roundTrip(["a", "b"], default: [], in: store) == .json(#"["a","b"]"#))
            #expect(try roundTrip(["z": 1, "a": 2], default: [:], in: store) == .json(#"{"a":2,"z":1}"#))
            #expect(try roundTrip([[1, 2], [3]], default: [], in: store) == .json("[[1,2],[3]]"))
            let nested = Nested(name: "n", tags: ["x"], created: Date(timeIntervalSince1970: 5), payload: Data([1]))
            let stored = try roundTrip(
                nested, default: Nested(name: "", tags: [], created: .distantPast, payload: Data()), in: store)
            #expect(stored?.tag == .json)
        }
    }

    @Test func rawRepresentableValuesAreStoredAsTheirRawValue() throws {
        try withTemporaryStore { store, _, _ throws in
            #expect(try roundTrip(Level.high, default: .low, in: store) == .int(2))
            #expect(try roundTrip(Theme.dark, default: .system, in: store) == .string("dark"))
        }
    }

    @Test func customConversionsStoreANonCodableValue() throws {
        struct ModeConversion: ValueConversion {
            static func decode(data: String) throws -> Mode {
                guard let mode = Mode(rawValue: data) else { throw StoredValueError("unknown mode \(data)") }
                return mode
            }
            static func encode(value: Mode) -> String { value.rawValue }
        }
        try withTemporaryStore { store, _, _ throws in
            let key = PersistentDefaults.Key<Mode>("mode", default: .fast, conversion: ModeConversion.self)
            store[key] = .safe
            #expect(store[key] == .safe)
            #expect(try store.storedValue(named: "mode") == .string("safe"))
            try store.setStoredValue(.string("turbo"), named: "mode")
            #expect(throws: PersistentDefaultsError.self) { try store.value(for: key) }
        }
    }

    @Test func optionalsStoreNilAsRemovalOrNull() throws {
        try withTemporaryStore { store, _, _ throws in
            let name = PersistentDefaults.Key<String?>("name")
            store[name] = "x"
            #expect(try store.storedValue(named: "name") == .string("x"))
            store[name] = nil
            #expect(try store.contains(name) == false)
            #expect(store[name] == nil)
            // A nil default is "absent"; a non-nil default needs an explicit null to read nil.
            let fallback = PersistentDefaults.Key<Int?>("fallback", default: 5)
            #expect(store[fallback] == 5)
            store[fallback] = nil
            #expect(store[fallback] == nil)
            #expect(try store.storedValue(named: "fallback") == .null)
        }
    }

    @Test func numericTagsConvertWhenNothingIsLost() throws {
        try withTemporaryStore { store, _, _ throws in
            try store.setStoredValue(.int(300), named: "n")
            #expect(try store.value(for: PersistentDefaults.Key<Double>("n", default: 0)) == 300)
            #expect(try store.value(for: PersistentDefaults.Key<UInt16>("n", default: 0)) == 300)
            #expect(throws: PersistentDefaultsError.self) {
                try store.value(for: PersistentDefaults.Key<Int8>("n", default: 0))
            }
            try store.setStoredValue(.double(2.5), named: "d")
            #expect(throws: PersistentDefaultsError.self) {
                try store.value(for: PersistentDefaults.Key<Int>("d", default: 0))
            }
        }
    }

    @Test func aValueThatDoesNotDecodeThrowsAndTheSubscriptReportsItOnce() throws {
        try withTemporaryStore { store, _, log throws in
            store[.launchCount] = 3
            let wrongType = PersistentDefaults.Key<String>("launchCount", default: "fallback")
            #expect {
                try store.value(for: wrongType)
            } throws: { error in
                guard case PersistentDefaultsError.decodingFailed(let key, let type, _) = error else { return false }
                return key == "launchCount" && type == "String"
            }
            #expect(store[wrongType] == "fallback")
            #expect(store[wrongType] == "fallback")
            #expect(try store.read { $0[wrongType] } == "fallback")
            let reports = log.all.filter { if case .decodingFailed = $0 { true } else { false } }
            #expect(reports.count == 1)
            // The stored value is untouched by the failed reads.
            #expect(store[.launchCount] == 3)
        }
    }

    @Test func datesReadBackExactlyEqualToTheDateThatWasSet() throws {
        var dates = (0..<500).map { _ in Date() }
        dates += (0..<500).map { _ in Date(timeIntervalSinceReferenceDate: .random(in: -4e10...4e10)) }
        dates += [
            .distantPast, .distantFuture, Date(timeIntervalSinceReferenceDate: 0),
            Date(timeIntervalSinceReferenceDate: 0.1), Date(timeIntervalSinceReferenceDate: -1e-9),
            Date(timeIntervalSinceReferenceDate: 816_000_000.123_456_7), Date(timeIntervalSince1970: 1_700_000_000.25),
            Date(timeIntervalSince1970: 0), Date(timeIntervalSinceReferenceDate: .leastNonzeroMagnitude),
            Date(timeIntervalSinceReferenceDate: 816_000_000.123_456_7.nextUp),
        ]
        // Before the fix about half of these failed: seconds since 1970 cannot hold every
        // seconds-since-2001 double that a `Date` is.
        let changedByBytes = try dates.filter {
            try StoredValue(encodedValue: StoredValue.date($0).encodedValue) != .date($0)
        }
        #expect(changedByBytes.isEmpty, "\(changedByBytes.count) of \(dates.count) dates change through their bytes")
        try withTemporaryStore { store, _, _ throws in
            let keys = dates.indices.map { PersistentDefaults.Key<Date>("date.\($0)", default: .distantPast) }
            let optional = PersistentDefaults.Key<Date?>("date.optional")
            try store.write { tx in
                for (key, date) in zip(keys, dates) { tx[key] = date }
                tx[optional] = dates[0]
            }
            let read = try store.read { snapshot in keys.map { snapshot[$0] } }
            let mismatches = zip(dates, read).filter {
                $0.timeIntervalSinceReferenceDate != $1.timeIntervalSinceReferenceDate
            }
            #expect(mismatches.isEmpty, "\(mismatches.count) of \(dates.count) dates read back different")
            #expect(try store.value(for: optional) == dates[0])
            for (key, date) in zip(keys, dates) where date == .distantFuture {
                #expect(try store.storedValue(named: key.name) == .date(.distantFuture))
            }
            // Setting the same date again is no change.
            let sequence = try store.lastSequence()
            try store.write { tx in for (key, date) in zip(keys, dates) { tx[key] = date } }
            #expect(try store.lastSequence() == sequence)
        }
    }

    @Test func aDateIsStoredAsSecondsSince2001AndTheOld1970FormStillReads() throws {
        let date = Date(timeIntervalSinceReferenceDate: 816_000_000.123_456_7)
        let bits = date.timeIntervalSinceReferenceDate.bitPattern
        let payload = (0..<8).reversed().map { UInt8(truncatingIfNeeded: bits >> (8 * UInt64($0))) }
        #expect(StoredValue.date(date).encodedValue == [0x0B] + payload)
        #expect(StoredValue.Tag.date.rawValue == 0x0B)
        // Tag 0x07, seconds since 1970, as stores written before tag 0x0B hold it.
        let legacy = 1_700_000_000.25
        let legacyBits = legacy.bitPattern
        let legacyBytes = [0x07] + (0..<8).reversed().map { UInt8(truncatingIfNeeded: legacyBits >> (8 * UInt64($0))) }
        #expect(try StoredValue(encodedValue: legacyBytes) == .date(Date(timeIntervalSince1970: legacy)))
        #expect(throws: StoredValueError.self) { try StoredValue(encodedValue: [0x07, 1, 2]) }
        #expect(throws: StoredValueError.self) { try StoredValue(encodedValue: [0x0B, 1, 2]) }
        try withTemporaryDirectory { path throws in
            do {
                let store = try PersistentDefaults(path: path)
                store[.launchCount] = 1
            }
            try rawLMDBPut(path, [RawLMDBEntry(database: "values", key: Array("legacy".utf8), value: legacyBytes)])
            let store = try PersistentDefaults(path: path)
            let key = PersistentDefaults.Key<Date>("legacy", default: .distantPast)
            #expect(try store.value(for: key) == Date(timeIntervalSince1970: legacy))
            #expect(try store.verify().isEmpty)
            // Setting the same date again is no change, though its bytes would now be tag 0x0B.
            let sequence = try store.lastSequence()
            try store.set(Date(timeIntervalSince1970: legacy), for: key)
            #expect(try store.lastSequence() == sequence)
            #expect(try store.read { try $0.commits(after: 0) }.count == 1)
        }
    }

    /// Dates that Foundation's calendar cannot show right were described as wrong dates: 1e300
    /// seconds and infinity as 506713-02-07, -1e300 and NaN as -4712-01-01.
    @Test func aDateOutsideTheCalendarIsDescribedAsItsSeconds() {
        let note = " seconds since 1970 (not shown as a date: outside 1582-10-15…9999-12-31)"
        let outside: [(Double, String)] = [
            (1e300, "1e+300"), (-1e300, "-1e+300"), (.nan, "nan"), (.infinity, "inf"), (-.infinity, "-inf"),
            (1e15, "1000000000000000.0"), (-12_219_292_801, "-12219292801.0"), (253_402_300_800, "253402300800.0"),
        ]
        for (seconds, text) in outside {
            #expect(StoredValue.date(Date(timeIntervalSince1970: seconds)).description == text + note)
        }
        let inside: [(Double, String)] = [
            (-12_219_292_800, "1582-10-15T00:00:00Z"), (0, "1970-01-01T00:00:00Z"),
            (253_402_300_799, "9999-12-31T23:59:59Z"),
        ]
        for (seconds, text) in inside {
            #expect(StoredValue.date(Date(timeIntervalSince1970: seconds)).description == text)
        }
    }

    @Test func storedValueBytesRoundTripAndRejectMalformedInput() throws {
        let values: [StoredValue] = [
            .null, .bool(false), .int(-1), .uint(9), .double(-0.5), .string(""), .data(Data()),
            .date(Date(timeIntervalSince1970: 0)), .url(try #require(URL(string: "file:///tmp"))), .uuid(UUID()),
            .json("{}"),
        ]
        for value in values { #expect(try StoredValue(encodedValue: value.encodedValue) == value) }
        let malformed: [[UInt8]] = [[], [0xFF], [0x01, 2], [0x02, 1, 2], [0x05, 0xC3], [0x00, 0], [0x09, 1]]
        for bytes in malformed {
            #expect(throws: StoredValueError.self) { try StoredValue(encodedValue: bytes) }
        }
        #expect(StoredValue.string("a\"b\n").jsonText == #""a\"b\n""#)
    }
}
