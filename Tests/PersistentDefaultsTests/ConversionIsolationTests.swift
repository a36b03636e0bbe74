import Foundation
import PersistentDefaults
import Testing

// Audit 6: `Key(_:default:conversion:)` took a main-actor-isolated conformance
// (`extension C: @MainActor ValueConversion`), and the Sendable key then ran the conversion's
// main-actor code on other threads (a detached task's read ran `decode` off the main thread,
// 1 of 1 runs). The initializer now requires `SendableMetatype`, and such a key is a compile
// error: "main actor-isolated conformance of 'C' to 'ValueConversion' cannot satisfy
// conformance requirement for a 'Sendable' type parameter". A nonisolated conversion still
// makes a key that any thread may use.

private struct NonisolatedIntBoolConversion: ValueConversion {
    static func decode(data: Int) -> Bool { data > 0 }
    static func encode(value: Bool) -> Int { value ? 1 : 0 }
}

@Suite struct ConversionIsolationTests {
    @Test func aNonisolatedConversionMakesAKeyForAnyThread() async throws {
        let store = try PersistentDefaults.temporary()
        let key = PersistentDefaults.Key<Bool>(
            "audit6.flag", default: false, conversion: NonisolatedIntBoolConversion.self)
        try store.setStoredValue(.int(1), named: "audit6.flag")
        #expect(await Task.detached { store[key] }.value)
    }
}
