import Foundation

/// What one measured row holds: a stable name and per-operation times, or a plain figure.
struct Measurement: Sendable {
    /// Stable across versions, e.g. `get/int/raw-lmdb`.
    var name: String
    /// Nanoseconds per operation; nil for rows that are a single figure (sizes, counts).
    var summary: Summary?
    /// A figure that is not a latency (bytes, commits/s), with its unit.
    var value: Double?
    var unit: String?
    /// Overrides the throughput computed from the mean (total commits/s of concurrent writers).
    var operationsPerSecond: Double?
    /// What the row means, printed under the table when present.
    var note: String?

    init(_ name: String, samples: [Double], note: String? = nil) {
        self.name = name
        summary = Summary(nanoseconds: samples)
        self.note = note
    }

    init(_ name: String, value: Double, unit: String, note: String? = nil) {
        self.name = name
        self.value = value
        self.unit = unit
        self.note = note
    }
}

/// The run's settings, passed to every case.
struct RunContext: Sendable {
    var quick: Bool
    /// A directory for this run; each case makes its own subdirectory and removes it.
    var root: String

    /// Runs `body` with a fresh empty directory, removed afterwards.
    func withTemporaryDirectory<R>(_ label: String, _ body: (String) throws -> R) throws -> R {
        let path = root + "/" + label + "-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: path) }  // Best effort: the run root goes too.
        return try body(path)
    }
}

/// A case: a stable name (what `--filter` matches) and one function that measures it.
struct BenchmarkCase: Sendable {
    var name: String
    var run: @Sendable (RunContext) throws -> [Measurement]
}

/// A case that needs an API the library does not have yet; listed, never measured.
struct PendingCase: Sendable {
    var name: String
    var reason: String
}

/// Every case, in the order they run and print.
let allCases: [BenchmarkCase] =
    getCases + serviceReadCases + setCases + largeValueCases + wrapperCases + interleavedCases + transactionCases
    + concurrencyCases
    + observerCases + scaleCases + referenceCases + lockReferenceCases + declareCases + fleetCases

/// Cases whose API does not exist yet; printed as "not yet available".
let pendingCases: [PendingCase] = []

/// A 3-field Codable struct, the non-primitive value of the get and set cases.
struct WindowFrame: Codable, Sendable, Equatable {
    var x: Double
    var y: Double
    var title: String
}
