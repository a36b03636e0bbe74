import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// A property whose type changed in code reads what the store holds only when nothing is lost;
/// otherwise its default, with the error reported, and the stored value is left as it was.
/// A `Double` changed to a `Float` read 1e300 as `inf` and 1e-50 as 0 with no error (failed 3
/// of 3 runs before the fix); the JSON decoding of `[Float]` already refused such numbers.
@Suite struct WrapperTypeChangeTests {
    @Test(arguments: [1e300, -1e300, Double.greatestFiniteMagnitude, 1e-50, -1e-50])
    func aDoubleThatAFloatCannotHoldReadsAsTheDefaultAndIsReported(stored: Double) async throws {
        try await withTemporaryStoreAsync { store, _, log throws in
            store[PersistentDefaults.Key<Double>("level", default: 0)] = stored  // the old code
            let level = PersistentDefault(PersistentDefaults.Key<Float>("level", default: 0.5), in: store)
            #expect(level.wrappedValue == 0.5)
            var values = level.projectedValue.values.makeAsyncIterator()
            #expect(await values.next() == 0.5)
            #expect(throws: PersistentDefaultsError.self) { try level.projectedValue.value() }
            #expect(log.all.contains { if case .decodingFailed(key: "level", _, _) = $0 { true } else { false } })
            #expect(try store.storedValue(named: "level") == .double(stored))
        }
    }

    @Test func doublesThatAFloatHoldsStillConvert() throws {
        try withTemporaryStore { store, _, log throws in
            let key = PersistentDefaults.Key<Float>("level", default: 0.5)
            for stored in [0.25, -3, 1e30, 1e-40, 0, -0.0, .infinity, -.infinity] {
                store[PersistentDefaults.Key<Double>("level", default: 0)] = stored
                #expect(store[key] == Float(stored))
            }
            store[PersistentDefaults.Key<Double>("level", default: 0)] = .nan
            #expect(store[key].isNaN)
            store[key] = 0.1
            #expect(store[key] == 0.1)
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }
}
