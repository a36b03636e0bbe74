import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// Stores an amount in cents, reads it in whole units: both sides are `Int`.
private enum CentsConversion: ValueConversion {
    static func decode(data: Int) -> Int { data / 100 }
    static func encode(value: Int) -> Int { value * 100 }
}

/// Stores a flag inverted: both sides are `Bool`.
private enum InvertedConversion: ValueConversion {
    static func decode(data: Bool) -> Bool { !data }
    static func encode(value: Bool) -> Bool { !value }
}

/// Stores metres, reads kilometres: both sides are `Double`.
private enum KilometresConversion: ValueConversion {
    static func decode(data: Double) -> Double { data / 1000 }
    static func encode(value: Double) -> Double { value * 1000 }
}

private struct DisabledKey: PersistentDefaultsKey {
    typealias Conversion = InvertedConversion
    static let defaultValue = false
}

extension PersistentDefaultsKey where Self == DisabledKey {
    fileprivate static var disabled: Self { Self() }
}

/// A conversion whose key value and stored value are the same primitive type (`Int` → `Int`,
/// `Bool` → `Bool`, `Double` → `Double`): a read of bytes the key did not know — written by a
/// transaction, another key object or another process — returned the stored value without
/// converting it (`Key.decode` read fixed-width values straight from their tag, whatever the
/// codec), so `set(4)` read back 400 from a cents key. Failed 3 of 3 runs before the fix, every
/// such read (12 of 12) unconverted.
@Suite struct SameTypeConversionTests {
    @Test func readsOfBytesTheKeyDidNotStoreAreConverted() throws {
        try withTemporaryStore { store, _, log throws in
            let cents = PersistentDefaults.Key<Int>("cents", default: 0, conversion: CentsConversion.self)
            let distance = PersistentDefaults.Key<Double>("distance", default: 0, conversion: KilometresConversion.self)
            try store.write { tx in
                tx[cents] = 4
                tx[distance] = 2.5
                tx[.disabled] = true
            }
            #expect(try store.storedValue(named: "cents") == .int(400))
            #expect(try store.storedValue(named: "distance") == .double(2500))
            #expect(try store.storedValue(named: "disabled") == .bool(false))
            var unconverted = 0
            for _ in 0..<2 {
                if try store.value(for: cents) != 4 { unconverted += 1 }
                if store[distance] != 2.5 { unconverted += 1 }
                if try store.value(for: .disabled) != true { unconverted += 1 }
            }
            let inSnapshot = try store.read { ($0[cents], $0[distance], $0[.disabled]) }
            if inSnapshot.0 != 4 { unconverted += 1 }
            if inSnapshot.1 != 2.5 { unconverted += 1 }
            if inSnapshot.2 != true { unconverted += 1 }
            // Another key object of the same name reads what the first one set.
            try store.set(7, for: cents)
            let other = PersistentDefaults.Key<Int>("cents", default: 0, conversion: CentsConversion.self)
            if try store.value(for: other) != 7 { unconverted += 1 }
            if try store.write({ try $0.value(for: other) }) != 7 { unconverted += 1 }
            if try store.read({ try $0.value(for: other) }) != 7 { unconverted += 1 }
            #expect(unconverted == 0, "\(unconverted) of 12 reads returned the stored value unconverted")
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }
}
