import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

@Suite struct GroupCommitBatchFailureTests {
    /// A batch whose transaction fails as a whole, because one request's value does not fit on
    /// the nearly full disk, failed every request in it: two small sets of other threads, which
    /// fit, got `ENOSPC` too. Each request of such a batch is now committed again on its own: the
    /// small ones commit, each with its own record, and only the large one fails. The batch is
    /// made by holding LMDB's writer lock in a `write { }` while one set leads (its batch waits
    /// for the lock) and the three others queue behind it.
    @Test(.enabled(if: canMountTmpfs, "mounting a tmpfs needs root with CAP_SYS_ADMIN"))
    func aBatchThatFailsOnAFullDiskFailsOnlyTheRequestsThatDoNotFitAlone() throws {
        try withTemporaryDirectory { mount throws in
            try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: false)
            #expect(try command("/bin/mount", ["-t", "tmpfs", "-o", "size=2m", "tmpfs", mount]) == 0)
            // Until the store is closed (the threads below may hold it a moment longer) the
            // unmount fails as busy.
            defer { _ = eventually(timeout: 10) { (try? command("/bin/umount", [mount])) == 0 } }
            let store = try PersistentDefaults(path: mount + "/store")
            let small = (0..<3).map { PersistentDefaults.Key<Int>("small.\($0)", default: 0) }
            let large = PersistentDefaults.Key<Data>("large", default: Data())
            for key in small { store[key] = 1 }
            let free = try #require(
                try FileManager.default.attributesOfFileSystem(forPath: mount)[.systemFreeSize] as? NSNumber)
            try Data(count: free.intValue - (128 << 10)).write(to: URL(fileURLWithPath: mount + "/filler"))
            let start = try store.lastSequence()

            let holding = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let done = DispatchGroup()
            done.enter()
            Thread {
                defer { done.leave() }
                try? store.write { _ in
                    holding.signal()
                    _ = release.wait(timeout: .now() + 30)
                }
            }.start()
            try #require(holding.wait(timeout: .now() + 10) == .success)
            let errors = Guarded<[String: String]>([:])
            func set(_ name: String, _ body: @escaping @Sendable () throws -> Void) {
                done.enter()
                Thread {
                    defer { done.leave() }
                    do { try body() } catch { errors.withLock { $0[name] = "\(error)" } }
                }.start()
            }
            set("leader") { try store.set(2, for: small[0]) }
            try #require(eventually(timeout: 10) { store.core.groupCommit.leadAndQueue == (true, 0) })
            set("large") { try store.set(Data(repeating: 7, count: 512 << 10), for: large) }
            set("small.1") { try store.set(2, for: small[1]) }
            set("small.2") { try store.set(2, for: small[2]) }
            try #require(eventually(timeout: 10) { store.core.groupCommit.leadAndQueue.queued == 3 })
            release.signal()
            try #require(done.wait(timeout: .now() + 30) == .success)

            let failed = errors.withLock { $0 }
            #expect(failed.keys.sorted() == ["large"], "\(failed)")
            #expect(failed["large"]?.contains("No space left") == true, "\(failed)")
            #expect(small.map { store[$0] } == [2, 2, 2])
            #expect(store[large].isEmpty)
            #expect(try store.lastSequence() == start + 3, "one commit each: the leader's and the two small ones")
            #expect(try store.verify().isEmpty)
        }
    }

    /// A batch whose requests include sets of keys a mirror owns: those fail alone with
    /// `ownedByMirror`, the others commit with consecutive sequences, each value once, in order.
    @Test func aMirrorOwnedSetInABatchFailsAloneAndTheOthersGetConsecutiveSequences() throws {
        try withTemporaryStore { store, _, _ throws in
            try store.core.write { writer in
                writer.logsWithoutValueChanges = true
                try store.core.recordMirror(
                    MirrorRecord(etcdPrefix: "/f/", endpoints: []), localPrefix: Array("fleet.".utf8),
                    in: try writer.live())
            }
            let start = try store.lastSequence()
            let threads = 8
            let rounds = 60
            let errors = Guarded<[String]>([])
            let group = DispatchGroup()
            for thread in 0..<threads {
                group.enter()
                Thread {
                    defer { group.leave() }
                    for round in 1...rounds {
                        let owned = (thread + round) % 3 == 0
                        let key = PersistentDefaults.Key<Int>(owned ? "fleet.\(thread)" : "t\(thread)", default: 0)
                        do {
                            try store.set(round, for: key)
                            if owned { errors.withLock { $0.append("owned \(thread) \(round) succeeded") } }
                        } catch PersistentDefaultsError.ownedByMirror {
                            if !owned { errors.withLock { $0.append("\(thread) \(round) refused") } }
                        } catch {
                            errors.withLock { $0.append("\(thread) \(round): \(error)") }
                        }
                    }
                }.start()
            }
            #expect(group.wait(timeout: .now() + 120) == .success)
            #expect(errors.withLock { $0 }.isEmpty, "\(errors.withLock { $0.prefix(10) })")
            let records = try store.commits(after: start)
            #expect(records.map(\.sequence) == Array((start + 1)...(start + UInt64(records.count))))
            var values: [String: [Int64]] = [:]
            for record in records {
                for change in record.changes {
                    #expect(!change.key.hasPrefix("fleet."))
                    if case .int(let value) = try change.storedValue() { values[change.key, default: []].append(value) }
                }
            }
            for thread in 0..<threads {
                let expected = (1...rounds).filter { (thread + $0) % 3 != 0 }.map(Int64.init)
                #expect(values["t\(thread)"] == expected)
            }
            #expect(try store.verify().isEmpty)
        }
    }
}
