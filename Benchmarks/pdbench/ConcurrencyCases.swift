import Foundation
import PersistentDefaults
import Synchronization

/// `concurrent/<n>-writers`: n threads each doing durable `store.set` on its own key.
let concurrencyCases: [BenchmarkCase] = [1, 2, 4, 8].map { threads in
    BenchmarkCase(name: "concurrent/\(threads)-writers") { [try concurrentWriters(threads: threads, $0)] }
}

private func concurrentWriters(threads: Int, _ context: RunContext) throws -> Measurement {
    try context.withTemporaryDirectory("concurrent") { path in
        let store = try PersistentDefaults(path: path)
        let keys = (0..<threads).map { PersistentDefaults.Key<Int>("writer-\($0)", default: -1) }
        for index in 0..<(context.quick ? 10 : 100) { try store.set(index, for: keys[0]) }  // Warm-up.
        let duration: UInt64 = context.quick ? 300_000_000 : 3_000_000_000
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
        var measurement = Measurement("concurrent/\(threads)-writers", samples: samples)
        measurement.operationsPerSecond = Double(samples.count) / elapsed * 1e9
        measurement.note = "durable store.set, one key per thread; ops/s = total commits/s"
        return measurement
    }
}
