import Foundation
import PersistentDefaults
import Synchronization
import Testing

private let offMainConversions = Atomic<Int>(0)

/// A conversion whose functions are main-actor code (it keeps main-actor state), conformed with
/// an isolated conformance (Swift 6.2, SE-0470): the compiler allows it only where the
/// conformance stays on the main actor.
private struct MainActorFlagConversion {}

@MainActor private var mainActorConversionCalls = 0

extension MainActorFlagConversion: @MainActor ValueConversion {
    @MainActor static func decode(data: Int) -> Bool {
        if !Thread.isMainThread { offMainConversions.add(1, ordering: .relaxed) }
        mainActorConversionCalls += 1  // main-actor state
        return data > 0
    }
    @MainActor static func encode(value: Bool) -> Int { value ? 1 : 0 }
}

@MainActor private func makeMainActorKey() -> PersistentDefaults.Key<Bool> {
    PersistentDefaults.Key<Bool>("audit6.flag", default: false, conversion: MainActorFlagConversion.self)
}

@Suite struct Audit6IsolationTests {
    @Test func aMainActorIsolatedConversionNeverRunsOffTheMainActor() async throws {
        let store = try PersistentDefaults.temporary()
        let key = await makeMainActorKey()  // Key is Sendable: it leaves the main actor
        try store.setStoredValue(.int(1), named: "audit6.flag")
        let value = await Task.detached { store[key] }.value
        #expect(value)
        #expect(offMainConversions.load(ordering: .relaxed) == 0)
    }
}

