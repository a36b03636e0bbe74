import Foundation
import PersistentDefaults
import Synchronization

/// `concurrent/<n>-writers`: n threads each doing durable `store.set` on its own key. One case
/// (`concurrent/writers`): the four thread counts take turns in short windows on one store,
/// round after round (forwards, then backwards), so that the disk's and the machine's drift
/// hits n writers and one writer alike; each row's commits/s is the median of its windows.
let concurrencyCases: [BenchmarkCase] = [
    BenchmarkCase(name: "concurrent/writers") { try concurrentWriters($0) }
]

private let writerCounts = [1, 2, 4, 8]

private func concurrentWriters(_ context: RunContext) throws -> [Measurement] {
    try context.withTemporaryDirectory("concurrent") { path in
        let store = try PersistentDefaults(path: path)
        let keys = (0..<writerCounts.max()!).map { PersistentDefaults.Key<Int>("writer-\($0)", default: -1) }
        for index in 0..<(context.quick ? 10 : 100) { try store.set(index, for: keys[0]) }  // Warm-up.
        let rounds = context.quick ? 3 : 8
        let window: UInt64 = context.quick ? 100_000_000 : 375_000_000
        let turns = try takeTurns(writerCounts.count, rounds: rounds) { index in
            try writeConcurrently(store, keys: Array(keys.prefix(writerCounts[index])), window)
        }
        return writerCounts.indices.map { index in
            var measurement = Measurement("concurrent/\(writerCounts[index])-writers", samples: turns[index].samples)
            measurement.operationsPerSecond = turns[index].medianPerSecond
            measurement.note =
                "durable store.set, one key per thread; ops/s = median over \(rounds) windows of the total commits/s"
            return measurement
        }
    }
}

/// One thread per key setting it durably for `duration` nanoseconds; returns every set's
/// latency and the total commits per second.
private func writeConcurrently(
    _ store: PersistentDefaults, keys: [PersistentDefaults.Key<Int>], _ duration: UInt64
) throws -> (samples: [Double], perSecond: Double) {
    let latencies = Mutex<[Double]>([])
    let failures = Mutex<[String]>([])
    let done = DispatchGroup()
    let start = monotonicNanoseconds()
    let deadline = start + duration
    for key in keys {
        done.enter()
        let thread = Thread {
            var own: [Double] = []
            var value = 0
            while true {
                let before = monotonicNanoseconds()
                if before >= deadline { break }
                do {
                    try store.set(value, for: key)
                } catch {
                    failures.withLock { $0.append("\(error)") }
                    break
                }
                own.append(Double(monotonicNanoseconds() - before))
                value += 1
            }
            latencies.withLock { $0 += own }
            done.leave()
        }
        thread.start()
    }
    done.wait()
    let elapsed = Double(monotonicNanoseconds() - start)
    if let failure = failures.withLock({ $0.first }) { throw BenchmarkError.setup(failure) }
    let samples = latencies.withLock { $0 }
    return (samples, Double(samples.count) / elapsed * 1e9)
}
