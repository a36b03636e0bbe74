import Foundation
import PersistentDefaults
import Testing

/// The typed JSON form of a value (`pdinspect export` files, the values an `EtcdMirror` keeps in
/// etcd) gives a date as seconds since 1970, a `Double` that cannot hold every date's own
/// seconds since 2001 once 978,307,200 is added: a date exported and imported, or set through a
/// mirror, came back as another date, not equal (`==`) to it — 6 of the 12 dates below, in
/// every run (3 of 3) before the fix. The seconds are now written with the decimal digits that
/// give back the date's own double.
@Suite struct TypedJSONDateTests {
    @Test func everyDateReadsBackEqualFromItsTypedJSON() throws {
        let references: [Double] = [
            0.1, 123_456.789, 1e-5, -0.3, 817_000_000.123_456_7, 1_000_000_000.000_001,
            -1_000_000_000.25, 6e9 + 0.5, 3.3, 86_400.999_999_9,
        ]
        let dates =
            references.map { Date(timeIntervalSinceReferenceDate: $0) }
            + [Date(timeIntervalSinceReferenceDate: 818_000_000.456_789), Date(timeIntervalSince1970: 1_764_579_600.5)]
        var changed: [String] = []
        for date in dates {
            let typed = StoredValue.date(date).typedJSON
            let back = try StoredValue(typedJSON: Array(typed.utf8))
            if back != .date(date) { changed.append("\(date.timeIntervalSinceReferenceDate) via \(typed)") }
        }
        #expect(changed.isEmpty, "\(changed.count) of \(dates.count) dates changed: \(changed)")
    }

    /// What other writers put in etcd or an export file still reads: seconds with few or many
    /// digits, an integer, and the strings of the non-finite doubles.
    @Test func secondsWrittenByOthersStillRead() throws {
        let cases: [(String, Double)] = [
            (#"{"type":"date","value":978307200}"#, 0),
            (#"{"type":"date","value":1796116343.2320714}"#, 1_796_116_343.232_071_4 - 978_307_200),
            (#"{"type":"date","value":-5}"#, -978_307_205),
            (#"{"type":"date","value":1e300}"#, 1e300),
        ]
        for (text, reference) in cases {
            let value = try StoredValue(typedJSON: Array(text.utf8))
            guard case .date(let date) = value else {
                Issue.record("\(text) read as \(value)")
                continue
            }
            #expect(abs(date.timeIntervalSinceReferenceDate - reference) <= abs(reference) * 1e-15, "\(text)")
        }
        let infinite = try StoredValue(typedJSON: Array(#"{"type":"date","value":"inf"}"#.utf8))
        #expect(infinite == .date(Date(timeIntervalSinceReferenceDate: .infinity)))
    }
}
