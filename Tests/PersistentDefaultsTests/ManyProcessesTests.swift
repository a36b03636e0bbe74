import Foundation
import PDTestSupport
import Synchronization
import Testing

@testable import PersistentDefaults

/// Many threads and many processes on one store at once, and observers in other PID namespaces
/// (containers sharing the store directory; found by the fifth audit, the two namespace tests
/// failed in every run before the fix).
@Suite struct ManyProcessesTests {
    private static let counter = PersistentDefaults.Key<Int>("counter", default: 0)

    /// Whether this machine lets a test start a process in a PID namespace of its own (root,
    /// or unprivileged user namespaces).
    private static let pidNamespacesWork: Bool = {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare"),
            let result = try? runProcess(URL(fileURLWithPath: "/usr/bin/unshare"), ["-pf", "/bin/true"])
        else { return false }
        return result.status == 0
    }()

    /// Containers that share a store directory (a volume) see each other's process IDs as
    /// nonexistent. An observing process in another PID namespace took over the wake-up slot of
    /// this live observing process (`kill(pid, 0)` said ESRCH), replaced its mask, and this
    /// process then passed other processes' commits of its key as "announced as none of mine":
    /// the change was never delivered, not even at the fallback check.
    @Test(.enabled(if: pidNamespacesWork))
    func anObserverInAnotherPIDNamespaceDoesNotCostThisProcessItsChanges() throws {
        try withTemporaryDirectory { path throws in
            var options = PersistentDefaults.Options()
            options.fallbackCheckInterval = .milliseconds(20)
            let store = try PersistentDefaults(path: path, options: options)
            let key = PersistentDefaults.Key<Int>("a", default: 0)
            let changes = Events<KeyChange<Int>>()
            let token = store.observe(key) { changes.append($0) }
            defer { token.cancel() }
            // Another observing process, in a PID namespace of its own, observing another key.
            let other = try ChildProcess(
                URL(fileURLWithPath: "/usr/bin/unshare"),
                ["-pf", "--kill-child", Products.fixture.path, "watch", path, "1", "b"])
            defer { _ = other.kill() }
            #expect(other.wait(for: "ready"))
            // A third process changes this process's key.
            try setFromAnotherProcess(path, "a", 1)
            #expect(changes.wait(forCount: 1, timeout: 5), "the change of a never arrived")
            #expect(changes.all.map(\.newValue) == [1])
            // And the other process still gets its own key's changes.
            try setFromAnotherProcess(path, "b", 1)
            #expect(other.wait(for: "change b 0 1", timeout: 5), "\(other.text)")
        }
    }

    /// Two containers' main processes both have process ID 1. A writer skipped every slot whose
    /// owner had its own process ID, taking it for its own process's: the other container's
    /// observer was never woken and waited for its fallback check (here a minute).
    @Test(.enabled(if: pidNamespacesWork))
    func aWriterWakesAnObserverWithTheSameProcessIDInAnotherNamespace() throws {
        try withTemporaryDirectory { path throws in
            _ = try PersistentDefaults(path: path)  // Creates the store and its channel.
            let unshare = URL(fileURLWithPath: "/usr/bin/unshare")
            let watcher = try ChildProcess(
                unshare, ["-pf", "--kill-child", Products.fixture.path, "watch", path, "1", "a"],
                environment: ["PD_FALLBACK_MS": "60000"])
            defer { _ = watcher.kill() }
            #expect(watcher.wait(for: "ready"))
            let writer = try runProcess(
                unshare, ["-pf", "--kill-child", Products.fixture.path, "set-int", path, "a", "1"])
            #expect(writer.status == 0, "\(writer.output)")
            #expect(watcher.wait(for: "change a 0 1", timeout: 5), "\(watcher.text)")
        }
    }

    /// Observers in this process of a key that two other processes (one `.bounded`, one `.sync`)
    /// and this process's own threads increment at once through `write { }`: every change once,
    /// in sequence order, each old value the previous new value, and the final count exact.
    @Test func changesOfThreeProcessesArriveOnceInOrderAndChain() throws {
        try withTemporaryDirectory { path throws in
            var options = PersistentDefaults.Options()
            options.fallbackCheckInterval = .milliseconds(50)
            let store = try PersistentDefaults(path: path, options: options)
            let changes = Events<KeyChange<Int>>()
            let token = store.observe(Self.counter) { changes.append($0) }
            defer { token.cancel() }
            let (threads, count) = (2, 150)
            let bounded = try ChildProcess(
                fixture: ["hammer", path, "\(threads)", "\(count)"], environment: ["PD_DURABILITY": "bounded"])
            let synced = try ChildProcess(fixture: ["hammer", path, "\(threads)", "\(count)"])
            DispatchQueue.concurrentPerform(iterations: threads) { _ in
                for _ in 0..<count { try? store.write { $0[Self.counter] += 1 } }
            }
            #expect(bounded.waitForExit() && bounded.process.terminationStatus == 0, "\(bounded.text)")
            #expect(synced.waitForExit() && synced.process.terminationStatus == 0, "\(synced.text)")
            let total = 3 * threads * count
            #expect(try store.value(for: Self.counter) == total)
            #expect(changes.wait(forCount: total, timeout: 20))
            let all = changes.all
            #expect(all.count == total)
            var previous = 0
            var lastSequence: UInt64 = 0
            for change in all {
                if change.oldValue != previous || change.newValue != previous + 1 || change.sequence <= lastSequence {
                    Issue.record("after \(previous) at \(lastSequence): \(change)")
                    break
                }
                previous = change.newValue
                lastSequence = change.sequence
            }
        }
    }

    /// The same with a log that keeps only a few records, pruned by the writers while this
    /// process reads it: changes across pruned records arrive as one, but still once each, in
    /// order, chaining, ending at the exact count.
    @Test func changesAcrossAPrunedLogStillChainAndEndExact() throws {
        try withTemporaryDirectory { path throws in
            var options = PersistentDefaults.Options()
            options.fallbackCheckInterval = .milliseconds(20)
            options.logRetention = 3
            let store = try PersistentDefaults(path: path, options: options)
            let changes = Events<KeyChange<Int>>()
            let token = store.observe(Self.counter) { changes.append($0) }
            defer { token.cancel() }
            let (threads, count) = (2, 200)
            let environment = ["PD_LOG_RETENTION": "2", "PD_DURABILITY": "bounded"]
            let children = try (0..<2).map { _ in
                try ChildProcess(fixture: ["hammer", path, "\(threads)", "\(count)"], environment: environment)
            }
            DispatchQueue.concurrentPerform(iterations: threads) { _ in
                for _ in 0..<count { try? store.write { $0[Self.counter] += 1 } }
            }
            for child in children {
                #expect(child.waitForExit() && child.process.terminationStatus == 0, "\(child.text)")
            }
            let total = 3 * threads * count
            #expect(try store.value(for: Self.counter) == total)
            #expect(eventually(timeout: 10) { changes.all.last?.newValue == total })
            var previous = 0
            var lastSequence: UInt64 = 0
            for change in changes.all {
                if change.oldValue != previous || change.newValue <= previous || change.sequence <= lastSequence {
                    Issue.record("after \(previous) at \(lastSequence): \(change)")
                    break
                }
                previous = change.newValue
                lastSequence = change.sequence
            }
            #expect(previous == total)
        }
    }

    /// N processes × M threads of `write { }` read-modify-write increments: the count is exact.
    @Test func incrementsOfManyProcessesAndThreadsAreExact() throws {
        try withTemporaryDirectory { path throws in
            let store = try boundedStore(at: path)
            let (processes, threads, count) = (4, 4, 100)
            let children = try (0..<processes).map { index in
                try ChildProcess(
                    fixture: ["hammer", path, "\(threads)", "\(count)"],
                    environment: index % 2 == 0 ? ["PD_DURABILITY": "bounded"] : [:])
            }
            for child in children {
                #expect(child.waitForExit(timeout: 120) && child.process.terminationStatus == 0, "\(child.text)")
            }
            #expect(try store.value(for: Self.counter) == processes * threads * count)
            let records = try store.commits(after: 0)
            #expect(records.count == processes * threads * count)
            #expect(records.map(\.sequence) == Array(UInt64(1)...UInt64(processes * threads * count)))
        }
    }
}
