import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// One "change KEY OLD NEW SEQUENCE" line of `pd-fixture watch`.
private struct WorkerChange: Equatable {
    var key: String
    var old: Int
    var new: Int
    var sequence: UInt64
}

private func changes(in child: ChildProcess) -> [WorkerChange] {
    child.lines.compactMap { line in
        let parts = line.split(separator: " ")
        guard parts.count == 5, parts[0] == "change", let old = Int(parts[2]), let new = Int(parts[3]),
            let sequence = UInt64(parts[4])
        else { return nil }
        return WorkerChange(key: String(parts[1]), old: old, new: new, sequence: sequence)
    }
}

/// The claimed slots of a store's `notify` file: process ID and wake-up word of each (host byte
/// order; slots of 16 bytes from offset 64, as many as the count at offset 8 says).
private func slots(_ path: String) -> [(processID: UInt32, word: UInt32)] {
    guard let bytes = fileBytes(path + "/notify"), bytes.count >= 64 else { return [] }
    return bytes.withUnsafeBytes { raw in
        let count = Int(raw.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
        return (0..<count).compactMap { index in
            let offset = 64 + index * 16
            guard offset + 16 <= raw.count else { return nil }
            let owner = raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self)
            return owner == 0 ? nil : (owner, raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self))
        }
    }
}

/// The generations of the claimed slots' words (without the sleeper bit).
private func generations(_ path: String) -> [UInt32] { slots(path).map { $0.word & ~1 } }

/// How many claimed slots have a watcher announced as asleep.
private func sleepers(_ path: String) -> Int { slots(path).filter { $0.word & 1 == 1 }.count }

@Suite struct CrossProcessWakeTests {
    @Test func theChannelFileHasMode0600AndAReadOnlyOpenCreatesNone() throws {
        try withTemporaryDirectory { path throws in
            let previous = umask(0)
            defer { umask(previous) }
            _ = try PersistentDefaults(path: path)
            var info = stat()
            #expect(stat(path + "/notify", &info) == 0)
            #expect(info.st_mode & 0o777 == 0o600)
            #expect(info.st_size == 20_480)
            try FileManager.default.removeItem(atPath: path + "/notify")
            var options = PersistentDefaults.Options()
            options.readOnly = true
            let readOnly = try PersistentDefaults(path: path, options: options)
            let token = readOnly.observe(.launchCount) { _ in }
            #expect(!FileManager.default.fileExists(atPath: path + "/notify"))
            token.cancel()
        }
    }

    @Test func fourWriterProcessesAndTwoObservingProcessesKeepOrderExactlyOnceAndOnlyRealChanges() throws {
        try withTemporaryStore { store, path, _ throws in
            let counter = PersistentDefaults.Key<Int>("counter", default: 0)
            let quiet = PersistentDefaults.Key<Int>("quiet", default: 0)
            store[quiet] = 7
            let perWriter = 100
            let total = 4 * perWriter
            let observers = try (0..<2).map { _ in
                try ChildProcess(fixture: ["watch", path, "\(total)", "counter", "quiet"])
            }
            for observer in observers { #expect(observer.wait(for: "ready")) }
            let writers = try (0..<4).map { _ in
                try ChildProcess(fixture: ["increment", path, "counter", "\(perWriter)"])
            }
            // Commits that change no observed key: another key, and the value quiet already has.
            let others = try [
                ChildProcess(fixture: ["increment", path, "other", "50"]),
                ChildProcess(fixture: ["set-int", path, "quiet", "7"]),
            ]
            for child in writers + others {
                #expect(child.waitForExit())
                #expect(child.process.terminationStatus == 0)
            }
            for observer in observers {
                #expect(observer.wait(for: "done"), "\(observer.text)")
                let seen = changes(in: observer)
                #expect(seen.map(\.key) == Array(repeating: "counter", count: total))
                #expect(seen.map(\.new) == Array(1...total))
                #expect(seen.map(\.old) == Array(0..<total))
                #expect(zip(seen, seen.dropFirst()).allSatisfy { $0.sequence < $1.sequence })
                observer.kill()
            }
            #expect(store[counter] == total)
        }
    }

    @Test func aWriterThatBypassesTheChannelIsNoticedWithinTheFallbackInterval() throws {
        var options = PersistentDefaults.Options()
        options.fallbackCheckInterval = .milliseconds(50)
        try withTemporaryStore(options: options) { store, path, _ throws in
            guard pythonHasLMDB else {
                Issue.record("python3 with the lmdb package is required (tools/setup installs it)")
                return
            }
            let changes = Events<KeyChange<Int>>()
            let token = store.observe(.launchCount) { changes.append($0) }
            let before = generations(path)
            #expect(try setIntBypassingTheLog(path, key: "launchCount", value: 5) == 0)
            // Python's lmdb does not know the channel: only the timed check can see this commit.
            // The wait is shorter than the default interval (1 s), so the option must be in use.
            #expect(changes.wait(forCount: 1, timeout: 0.8))
            #expect(changes.all.map(\.newValue) == [5])
            #expect(generations(path) == before)
            _ = token
        }
    }

    @Test func waitersKilledMidWaitLeaveSetsWorkingAndTheChannelUsable() throws {
        try withTemporaryStore { store, path, _ throws in
            let counter = PersistentDefaults.Key<Int>("counter", default: 0)
            let victims = try (0..<3).map { _ in try ChildProcess(fixture: ["watch", path, "1000", "counter"]) }
            for victim in victims { #expect(victim.wait(for: "ready")) }
            // Each watcher claimed a slot, announced itself on its word and sleeps on it.
            #expect(slots(path).count == 3)
            #expect(eventually { sleepers(path) == 3 })
            for victim in victims { victim.kill() }
            for value in 1...50 { try store.set(value, for: counter) }
            #expect(store[counter] == 50)
            // The first set woke nobody and cleared the sleeper bits: later sets make no system call.
            #expect(sleepers(path) == 0)
            let survivor = try ChildProcess(fixture: ["watch", path, "1", "counter"])
            #expect(survivor.wait(for: "ready"))
            try store.set(51, for: counter)
            #expect(survivor.wait(for: "done"), "\(survivor.text)")
            #expect(changes(in: survivor) == [WorkerChange(key: "counter", old: 50, new: 51, sequence: 51)])
            survivor.kill()
        }
    }

    @Test func aProcessObservingOtherKeysIsNotWoken() throws {
        try withTemporaryStore { store, path, _ throws in
            let watched = PersistentDefaults.Key<Int>("watched", default: 0)
            let busy = PersistentDefaults.Key<Int>("other", default: 0)  // another hash bit than "watched"
            let watcher = try ChildProcess(fixture: ["watch", path, "1", "watched"])
            #expect(watcher.wait(for: "ready"))
            #expect(eventually { sleepers(path) == 1 })
            let before = generations(path)
            for value in 1...50 { try store.set(value, for: busy) }
            // No commit carried the watched key's bit: its word never moved, nobody was woken.
            #expect(generations(path) == before)
            #expect(sleepers(path) == 1)
            try store.set(1, for: watched)
            #expect(watcher.wait(for: "done"), "\(watcher.text)")
            #expect(changes(in: watcher) == [WorkerChange(key: "watched", old: 0, new: 1, sequence: 51)])
            watcher.kill()
        }
    }

    @Test func aStoreDirectoryCopiedWhileObservedWorksOnItsOwn() throws {
        try withTemporaryStore { store, path, _ throws in
            let counter = PersistentDefaults.Key<Int>("counter", default: 0)
            store[counter] = 1
            let original = Events<Int>()
            let token = store.observe(counter) { original.append($0.newValue) }
            let watcher = try ChildProcess(fixture: ["watch", path, "1", "counter"])
            #expect(watcher.wait(for: "ready"))
            // Copied with a waiter asleep on the word, so the copy's notify file says so too.
            let copy = path + "-copy"
            defer { try? FileManager.default.removeItem(atPath: copy) }
            try FileManager.default.copyItem(atPath: path, toPath: copy)
            let copyWatcher = try ChildProcess(fixture: ["watch", copy, "1", "counter"])
            #expect(copyWatcher.wait(for: "ready"))
            #expect(try runFixture(["set-int", copy, "counter", "20"]).status == 0)
            #expect(copyWatcher.wait(for: "done"), "\(copyWatcher.text)")
            #expect(changes(in: copyWatcher) == [WorkerChange(key: "counter", old: 1, new: 20, sequence: 2)])
            try store.set(2, for: counter)
            #expect(watcher.wait(for: "done"), "\(watcher.text)")
            #expect(changes(in: watcher) == [WorkerChange(key: "counter", old: 1, new: 2, sequence: 2)])
            #expect(original.wait(forCount: 1))
            #expect(original.all == [2])
            for child in [watcher, copyWatcher] { child.kill() }
            token.cancel()
        }
    }

    @Test func anObserverThatCannotWriteTheChannelFileUsesTheFallback() throws {
        let path = "/tmp/pd-channel-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let store = try PersistentDefaults(path: path)
        let counter = PersistentDefaults.Key<Int>("counter", default: 0)
        store[counter] = 1
        // Readable by all, the lock file writable by all (so LMDB locks as usual), the channel
        // file writable by its owner only.
        #expect(chmod(path, 0o755) == 0 && chmod(path + "/data.mdb", 0o644) == 0)
        #expect(chmod(path + "/lock.mdb", 0o666) == 0 && chmod(path + "/notify", 0o444) == 0)
        var arguments = ["watch", path, "1", "counter"]
        var executable: URL?
        if geteuid() == 0 {
            // Root ignores file modes: run the observer as nobody, from a copy that nobody can reach.
            guard FileManager.default.fileExists(atPath: "/usr/bin/setpriv") else {
                Issue.record("running as root needs /usr/bin/setpriv to drop to user nobody")
                return
            }
            let worker = "/tmp/pd-fixture-\(UUID().uuidString)"
            try FileManager.default.copyItem(atPath: Products.fixture.path, toPath: worker)
            executable = URL(fileURLWithPath: "/usr/bin/setpriv")
            arguments = ["--reuid=65534", "--regid=65534", "--clear-groups", worker] + arguments
        }
        defer { if let worker = arguments.first(where: { $0.hasPrefix("/tmp/pd-fixture-") }) { unlink(worker) } }
        let observer = try ChildProcess(
            executable ?? Products.fixture, arguments, environment: ["PD_READ_ONLY": "1", "PD_FALLBACK_MS": "50"])
        #expect(observer.wait(for: "ready"), "\(observer.text)")
        #expect(observer.text.contains("channel writable: no"))
        try store.set(2, for: counter)
        #expect(observer.wait(for: "done"), "\(observer.text)")
        #expect(changes(in: observer) == [WorkerChange(key: "counter", old: 1, new: 2, sequence: 2)])
        observer.kill()
    }
}
