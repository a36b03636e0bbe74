import Foundation
import PersistentDefaults

/// `get|set/<int|struct>/property-wrapper`: the `@PersistentDefault` wrapper, per operation.
/// `set/<int|struct>/property-wrapper-read`: the same set after the wrapper was read once, which
/// starts the key's Observation tracking (a store observer of the key), as in an app whose views
/// read the setting.
let wrapperCases: [BenchmarkCase] = makeWrapperCases(Int.self) + makeWrapperCases(WindowFrame.self)

private func makeWrapperCases<V: BenchmarkValue>(_: V.Type) -> [BenchmarkCase] {
    let get = "get/\(V.label)/property-wrapper"
    let set = "set/\(V.label)/property-wrapper"
    let setAfterRead = "set/\(V.label)/property-wrapper-read"
    return [
        BenchmarkCase(name: get) { context in
            try context.withTemporaryDirectory("wrapper-get") { path in
                let store = try PersistentDefaults(path: path)
                let wrapper = PersistentDefault(PersistentDefaults.Key<V>("key", default: V.sample(0)), in: store)
                wrapper.wrappedValue = V.sample(42)
                var sum = 0
                let plan: Plan = V.self == Int.self ? .fast(quick: context.quick) : .medium(quick: context.quick)
                let samples = measure(plan) { _ in sum &+= wrapper.wrappedValue.checksum }
                blackHole(sum)
                return [Measurement(get, samples: samples)]
            }
        },
        BenchmarkCase(name: set) { context in
            [
                try wrapperSet(
                    V.self, name: set, readFirst: false, note: "bounded durability: compare with store-bounded", context
                )
            ]
        },
        BenchmarkCase(name: setAfterRead) { context in
            [try wrapperSet(V.self, name: setAfterRead, readFirst: true, note: "bounded; the key is tracked", context)]
        },
    ]
}

/// Sets through a `@PersistentDefault` of a `.bounded` store; with `readFirst`, the property is
/// read once before, which starts the key's Observation tracking.
private func wrapperSet<V: BenchmarkValue>(
    _: V.Type, name: String, readFirst: Bool, note: String, _ context: RunContext
) throws -> Measurement {
    try context.withTemporaryDirectory("wrapper-set") { path in
        var options = PersistentDefaults.Options()
        options.durability = .bounded(interval: .seconds(1))
        let store = try PersistentDefaults(path: path, options: options)
        let wrapper = PersistentDefault(PersistentDefaults.Key<V>("key", default: V.sample(-1)), in: store)
        if readFirst { blackHole(wrapper.wrappedValue.checksum) }
        let samples = measure(.medium(quick: context.quick)) { index in wrapper.wrappedValue = V.sample(index) }
        return Measurement(name, samples: samples, note: note)
    }
}
