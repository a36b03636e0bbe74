#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Monotonic time in nanoseconds (`clock_gettime(CLOCK_MONOTONIC)`).
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

/// How long a case runs: warm-up operations, then timed samples of `batch` operations each.
struct Plan {
    var warmup: Int
    var samples: Int
    var batch: Int

    /// For operations well under a microsecond: batches of 100, so the clock is read rarely.
    static func fast(quick: Bool) -> Plan {
        quick ? Plan(warmup: 2_000, samples: 300, batch: 100) : Plan(warmup: 50_000, samples: 5_000, batch: 100)
    }

    /// For operations of a few microseconds.
    static func medium(quick: Bool) -> Plan {
        quick ? Plan(warmup: 200, samples: 300, batch: 10) : Plan(warmup: 5_000, samples: 5_000, batch: 10)
    }

    /// For operations that reach the disk (durable commits, `synchronize()`): one per sample.
    static func slow(quick: Bool) -> Plan {
        quick ? Plan(warmup: 10, samples: 50, batch: 1) : Plan(warmup: 200, samples: 2_000, batch: 1)
    }
}

/// Runs `operation` (passed a running counter) `plan.warmup` times, then times
/// `plan.samples` batches; returns nanoseconds per operation for each batch.
func measure(_ plan: Plan, _ operation: (Int) throws -> Void) rethrows -> [Double] {
    var counter = 0
    for _ in 0..<plan.warmup {
        try operation(counter)
        counter += 1
    }
    var samples: [Double] = []
    samples.reserveCapacity(plan.samples)
    for _ in 0..<plan.samples {
        let start = monotonicNanoseconds()
        for _ in 0..<plan.batch {
            try operation(counter)
            counter += 1
        }
        let end = monotonicNanoseconds()
        samples.append(Double(end - start) / Double(plan.batch))
    }
    return samples
}

/// Percentiles and throughput of a set of per-operation samples.
struct Summary: Sendable {
    var p50: Double
    var p90: Double
    var p99: Double
    var mean: Double
    var count: Int

    init(nanoseconds samples: [Double]) {
        let sorted = samples.sorted()
        count = sorted.count
        func percentile(_ fraction: Double) -> Double {
            guard !sorted.isEmpty else { return .nan }
            let index = min(sorted.count - 1, Int((Double(sorted.count) * fraction).rounded(.down)))
            return sorted[index]
        }
        p50 = percentile(0.50)
        p90 = percentile(0.90)
        p99 = percentile(0.99)
        mean = sorted.isEmpty ? .nan : sorted.reduce(0, +) / Double(sorted.count)
    }

    /// Operations per second from the mean time per operation.
    var operationsPerSecond: Double { mean > 0 ? 1e9 / mean : .nan }
}

/// Formats nanoseconds with a unit that keeps three significant digits.
func formatDuration(_ nanoseconds: Double) -> String {
    guard nanoseconds.isFinite else { return "-" }
    if nanoseconds < 1_000 { return format(nanoseconds, decimals: nanoseconds < 10 ? 2 : 0) + " ns" }
    if nanoseconds < 1_000_000 { return format(nanoseconds / 1_000, decimals: nanoseconds < 10_000 ? 2 : 1) + " µs" }
    if nanoseconds < 1_000_000_000 {
        return format(nanoseconds / 1_000_000, decimals: nanoseconds < 10_000_000 ? 2 : 1) + " ms"
    }
    return format(nanoseconds / 1_000_000_000, decimals: 2) + " s"
}

/// `value` with a fixed number of decimals.
func format(_ value: Double, decimals: Int) -> String {
    guard value.isFinite else { return "-" }
    var scale = 1.0
    for _ in 0..<decimals { scale *= 10 }
    let rounded = (value * scale).rounded() / scale
    var text = String(Int(rounded.rounded(.towardZero)))
    if rounded < 0, Int(rounded.rounded(.towardZero)) == 0 { text = "-0" }
    guard decimals > 0 else { return text }
    let fraction = Int((abs(rounded) * scale).rounded()) % Int(scale)
    let digits = String(fraction)
    return text + "." + String(repeating: "0", count: decimals - digits.count) + digits
}

/// Like `measure`, but alternates samples of `first` and `second`, so that drift in the
/// machine (other builds, disk flushes) hits both alike; returns both sample sets.
func measureInterleaved(_ plan: Plan, _ first: (Int) throws -> Void, _ second: (Int) throws -> Void) throws
    -> (first: [Double], second: [Double])
{
    let samples = try withoutActuallyEscaping(first) { first in
        try withoutActuallyEscaping(second) { second in try measureAlternating(plan, [first, second]) }
    }
    return (samples[0], samples[1])
}

/// Like `measure`, for several bodies: each sample of each body in turn, so that drift hits all
/// alike; returns the sample sets in the order of `bodies`.
///
/// The body that starts a round moves on by one each round, so that no body always runs right
/// after the same other one: a durable commit's `fdatasync` costs more after another file's
/// commit than after its own (the file system's journal), and in a fixed order that cost fell
/// on one side only (the store's 1,000-key transaction read 1.12–1.23× its floor with the same
/// bytes written, against 1.19–1.25× without `fsync`).
func measureAlternating(_ plan: Plan, _ bodies: [(Int) throws -> Void]) throws -> [[Double]] {
    for index in 0..<plan.warmup {
        for body in bodies { try body(index) }
    }
    var counter = plan.warmup
    var samples = [[Double]](repeating: [], count: bodies.count)
    for round in 0..<plan.samples {
        for step in 0..<bodies.count {
            let position = (round + step) % bodies.count
            let start = monotonicNanoseconds()
            for offset in 0..<plan.batch { try bodies[position](counter + offset) }
            samples[position].append(Double(monotonicNanoseconds() - start) / Double(plan.batch))
        }
        counter += plan.batch
    }
    return samples
}

/// Runs `count` configurations in turns, for cases whose sides cannot alternate sample by sample
/// (thread counts): `rounds` rounds, forwards then backwards, each configuration one window per
/// round (`window(index)` runs it and returns its samples and operations per second), so that
/// the machine's drift hits every configuration alike. Returns, per configuration, the samples
/// of all its windows and the median of its windows' operations per second.
func takeTurns(
    _ count: Int, rounds: Int, _ window: (Int) throws -> (samples: [Double], perSecond: Double)
) rethrows -> [(samples: [Double], medianPerSecond: Double)] {
    var samples = Array(repeating: [Double](), count: count)
    var rates = Array(repeating: [Double](), count: count)
    for round in 0..<rounds {
        let order = round.isMultiple(of: 2) ? Array(0..<count) : (0..<count).reversed()
        for index in order {
            let (own, perSecond) = try window(index)
            samples[index] += own
            rates[index].append(perSecond)
        }
    }
    return (0..<count).map { (samples[$0], rates[$0].sorted()[rates[$0].count / 2]) }
}
