import Foundation
import PDTestSupport
import PersistentDefaults
import Synchronization
import Testing

/// Group-committed durable sets whose batches must grow the map, while other threads read in
/// `read { }` scopes and single reads and another process grows the map too.
@Suite struct GroupCommitGrowthTests {
    /// Every set that returned is in the store with its bytes; readers never see a value torn
    /// between two sets; every set fails only for its own reason (over the size limit); the log
    /// has one record per commit, with no gap; nobody waits for ever.
    @Test func batchesThatGrowTheMapWhileOthersReadAndAnotherProcessGrowsIt() throws {
        var options = PersistentDefaults.Options()
        options.initialMapSize = 64 << 10  // Grows many times.
        options.maxValueSize = 128 << 10
        try withTemporaryStore(options: options) { store, path, log throws in
            let writers = 4
            let rounds = 60
            let start = try store.lastSequence()
            let keys = (0..<writers).map { PersistentDefaults.Key<Data>("w\($0)", default: Data()) }
            let failures = Guarded<[String]>([])
            let torn = Counter()
            let reads = Counter()
            let writing = Atomic<Int>(writers)
            let group = DispatchGroup()
            for writer in 0..<writers {
                group.enter()
                Thread {
                    defer {
                        writing.subtract(1, ordering: .releasing)
                        group.leave()
                    }
                    for round in 1...rounds {
                        do {
                            // 2 KiB to 62 KiB: the batches outgrow the map again and again.
                            let size = (2 + (round * 7 + writer * 13) % 61) << 10
                            try store.set(Data(repeating: UInt8(round), count: size), for: keys[writer])
                        } catch {
                            failures.withLock { $0.append("w\(writer) round \(round): \(error)") }
                        }
                        do {
                            try store.set(Data(count: 200 << 10), for: keys[writer])
                            failures.withLock { $0.append("w\(writer) round \(round): over the limit, but set") }
                        } catch PersistentDefaultsError.valueTooLarge {
                        } catch {
                            failures.withLock { $0.append("w\(writer) round \(round) (too large): \(error)") }
                        }
                    }
                }.start()
            }
            for reader in 0..<2 {
                group.enter()
                Thread {
                    defer { group.leave() }
                    while writing.load(ordering: .acquiring) > 0 {
                        do {
                            let values =
                                reader == 0
                                ? try store.read { snapshot in (0..<writers).map { snapshot[keys[$0]] } }
                                : try (0..<writers).map { try store.value(for: keys[$0]) }
                            for value in values where Set(value).count > 1 { torn.increment() }
                            reads.increment()
                        } catch {
                            failures.withLock { $0.append("reader \(reader): \(error)") }
                        }
                    }
                }.start()
            }
            for (index, size) in [1 << 20, 3 << 20].enumerated() {
                let result = try runFixture(["set-bytes", path, "blob\(index)", "\(size)"])
                #expect(result.status == 0, "\(result.output)")
            }
            #expect(group.wait(timeout: .now() + 60) == .success, "a writer or reader never returned")
            #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0.prefix(5) })")
            #expect(torn.value == 0)
            #expect(reads.value > 0)
            for writer in 0..<writers {
                let size = (2 + (rounds * 7 + writer * 13) % 61) << 10
                #expect(try store.value(for: keys[writer]) == Data(repeating: UInt8(rounds), count: size))
            }
            // The log keeps the newest records (the big values make it prune by bytes): no gap.
            let records = try store.commits(after: start)
            let last = try store.lastSequence()
            #expect(last > start + 2 && last <= start + UInt64(writers * rounds + 2))
            #expect(records.map(\.sequence) == Array((last + 1 - UInt64(records.count))...last))
            #expect(try store.statistics().mapSize >= 3 << 20)
            #expect(try store.verify().isEmpty)
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }
}
