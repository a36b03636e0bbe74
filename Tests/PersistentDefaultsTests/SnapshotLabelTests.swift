import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

/// LMDB 0.9 can begin a read whose snapshot is a later commit than its transaction ID names
/// (see `Environment.snapshotMayShowALaterCommit`): the store renews such a read. Without that,
/// this test saw 8–82 mislabelled snapshots a run (30,000 to 100,000 writes).
@Suite("Reads: a snapshot shows exactly the commit its transaction ID names")
struct SnapshotLabelTests {
    static let counter = PersistentDefaults.Key<Int>("counter", default: 0)

    /// A store with bounded durability and the counter at 0, and how many writes to make:
    /// `writes`, or `PD_SOAK_WRITES` (`tools/read-soak`).
    private static func withCounterStore(
        writes: Int, _ body: (PersistentDefaults, String, ErrorLog, Int) throws -> Void
    ) throws {
        var options = PersistentDefaults.Options()
        options.durability = .bounded(interval: .seconds(10))
        try withTemporaryStore(options: options) { store, path, log in
            store[Self.counter] = 0
            try body(store, path, log, Int(ProcessInfo.processInfo.environment["PD_SOAK_WRITES"] ?? "") ?? writes)
        }
    }

    /// The snapshot's transaction ID and the counter, read in one read through the store's
    /// own read path (the thread's reader slot).
    private static func labelledRead(_ store: PersistentDefaults) -> Result<(id: Int, value: Int), any Error> {
        Result {
            try store.core.environment.withRead { transaction in
                (id: transaction.id, value: try store.core.value(Self.counter, in: transaction))
            }
        }
    }

    /// One writer commits the counter's values 1, 2, 3… one transaction each, so the commit
    /// with ID `base + n` stores `n`; 16 reader threads (more than cores, so that readers are
    /// preempted inside `mdb_txn_renew`) read the ID and the value in one snapshot.
    @Test func aSnapshotShowsTheCommitOfItsIDAndReadsNeverGoBack() throws {
        try Self.withCounterStore(writes: 30_000) { store, _, log, writes in
            let base = store.core.environment.info().lastTransactionID
            let readers = 16
            let failures = Guarded<[String]>([])
            let reads = Guarded<Int>(0)
            onJoinedThreads(readers + 1) { index in
                if index == readers {
                    for value in 1...writes { store[Self.counter] = value }
                    return
                }
                var last = 0
                var count = 0
                while last < writes {
                    let read = Self.labelledRead(store)
                    guard case .success(let (id, value)) = read else {
                        failures.withLock { $0.append("thread \(index): \(read)") }
                        return
                    }
                    count += 1
                    if value != id - base {
                        failures.withLock { $0.append("thread \(index): snapshot \(id - base) shows \(value)") }
                    }
                    if value < last { failures.withLock { $0.append("thread \(index): \(value) after \(last)") } }
                    last = value
                }
                reads.withLock { $0 += count }
            }
            let found = failures.withLock { $0 }
            #expect(found.isEmpty, "\(found.count) in \(reads.withLock { $0 }) reads: \(found.prefix(5))")
            #expect(reads.withLock { $0 } >= readers)
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// The same with the writer in another process (`pd-fixture increment`: one `write { }` per
    /// increment), where the reader learns of commits only through the lock file, as the
    /// watcher does. Any commit the child makes besides the increments only moves IDs ahead, so
    /// between two reads of a thread the value may not go back and may not advance by more than
    /// the IDs did: a snapshot showing a later commit than its ID breaks one of the two.
    @Test func snapshotsOfAnotherProcessesCommitsShowTheirIDsCommit() throws {
        try Self.withCounterStore(writes: 20_000) { store, path, log, writes in
            let writer = try ChildProcess(
                fixture: ["increment", path, Self.counter.name, "\(writes)"],
                environment: ["PD_DURABILITY": "bounded", "PD_BOUNDED_MS": "10000"])
            defer { writer.kill() }
            let failures = Guarded<[String]>([])
            let reads = Guarded<Int>(0)
            onJoinedThreads(16) { index in
                var last = (id: 0, value: 0)
                var count = 0
                while last.value < writes {
                    let read = Self.labelledRead(store)
                    guard case .success(let now) = read else {
                        failures.withLock { $0.append("thread \(index): \(read)") }
                        return
                    }
                    count += 1
                    if count > 1, now.value < last.value || now.value - last.value > now.id - last.id {
                        failures.withLock { $0.append("thread \(index): \(last) then \(now)") }
                    }
                    last = now
                }
                reads.withLock { $0 += count }
            }
            #expect(writer.waitForExit(timeout: Double(max(120, writes / 1_000))))
            #expect(writer.result.status == 0, "\(writer.result.output)")
            let found = failures.withLock { $0 }
            #expect(found.isEmpty, "\(found.count) in \(reads.withLock { $0 }) reads: \(found.prefix(5))")
            #expect(store[Self.counter] == writes)
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }
}
