import Foundation
import PersistentDefaults

/// `reference/…`: costs that explain the gaps between the store and raw LMDB.
let referenceCases: [BenchmarkCase] = [
    BenchmarkCase(name: "reference/struct/json-encode-reused-encoder") { context in
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var sum = 0
        let samples = try measure(.medium(quick: context.quick)) { index in
            sum &+= try encoder.encode(WindowFrame.sample(index)).count
        }
        blackHole(sum)
        return [Measurement("reference/struct/json-encode-reused-encoder", samples: samples)]
    },
    BenchmarkCase(name: "reference/struct/json-encode-new-encoder") { context in
        var sum = 0
        let samples = try measure(.medium(quick: context.quick)) { index in
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            sum &+= try encoder.encode(WindowFrame.sample(index)).count
        }
        blackHole(sum)
        return [
            Measurement(
                "reference/struct/json-encode-new-encoder", samples: samples,
                note: "what the library's JSON codec does per encode")
        ]
    },
    BenchmarkCase(name: "reference/struct/json-decode-reused-decoder") { context in
        let data = try JSONEncoder().encode(WindowFrame.sample(42))
        let decoder = JSONDecoder()
        var sum = 0
        let samples = try measure(.medium(quick: context.quick)) { _ in
            sum &+= try decoder.decode(WindowFrame.self, from: data).checksum
        }
        blackHole(sum)
        return [Measurement("reference/struct/json-decode-reused-decoder", samples: samples)]
    },
    BenchmarkCase(name: "set/int/store-bounded-pruning") { context in
        try context.withTemporaryDirectory("pruning") { path in
            var options = PersistentDefaults.Options()
            options.durability = .bounded(interval: .milliseconds(100))
            options.logRetention = 100
            let store = try PersistentDefaults(path: path, options: options)
            let key = PersistentDefaults.Key<Int>("key", default: -1)
            for index in 0..<200 { try store.set(-index - 2, for: key) }  // Past the retention.
            let samples = try measure(.medium(quick: context.quick)) { index in try store.set(index, for: key) }
            return [
                Measurement(
                    "set/int/store-bounded-pruning", samples: samples,
                    note: "logRetention 100: every 6th commit prunes 6 log records (slack 100/16)")
            ]
        }
    },
]
