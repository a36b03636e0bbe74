import Foundation
import PersistentDefaults
import Testing

/// A Codable value with numbers a `Double` does not hold: a decimal amount of 25 digits, an
/// integer past `UInt64.max`, and a negative zero.
private struct Ledger: Codable, Equatable {
    var amount: Decimal
    var total: Decimal
    var offset: Double
}

/// A `json` value's typed JSON form (`pdinspect export` files, the values an `EtcdMirror` keeps in
/// etcd) embeds the JSON, which `JSONValue` parsed into `Int64`, `UInt64` or `Double` numbers: a
/// number with more digits than a double holds lost them, and `-0` its sign, so a value exported
/// and imported, or set through a mirror, came back as another value (3 of 3 numbers below, in
/// every run: 3 of 3 before the fix).
@Suite struct TypedJSONNumberTests {
    @Test func aJSONValueKeepsItsNumbersThroughItsTypedJSON() throws {
        let ledger = Ledger(
            amount: Decimal(string: "1234567890.123456789012345")!, total: Decimal(string: "18446744073709551616")!,
            offset: -0.0)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let value = StoredValue.json(String(decoding: try encoder.encode(ledger), as: UTF8.self))
        let back = try StoredValue(typedJSON: Array(value.typedJSON.utf8))
        guard case .json(let text) = back else {
            Issue.record("read back as \(back)")
            return
        }
        let read = try JSONDecoder().decode(Ledger.self, from: Data(text.utf8))
        var changed: [String] = []
        if read.amount != ledger.amount { changed.append("amount \(read.amount)") }
        if read.total != ledger.total { changed.append("total \(read.total)") }
        if read.offset.sign != .minus { changed.append("offset \(read.offset)") }
        #expect(changed.isEmpty, "\(changed.count) of 3 numbers changed: \(changed) in \(text)")
        #expect(back == value, "\(value) → \(back)")
    }

    /// Numbers a double holds keep their short form.
    @Test func numbersADoubleHoldsKeepTheirForm() throws {
        for text in [
            #"[0.1,1.5,-2,1e+300,18446744073709551615,-9223372036854775808]"#, #"{"a":3.25,"b":[1,0]}"#,
            #"[1e-05,5e-324,1.7976931348623157e+308,123456789.12345679,-0.001,2.5e-10,1e+20]"#,
        ] {
            let value = StoredValue.json(text)
            #expect(try StoredValue(typedJSON: Array(value.typedJSON.utf8)) == value, "\(text)")
        }
    }
}
