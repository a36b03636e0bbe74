import Foundation
import PDTestSupport
import PersistentDefaults
import Synchronization
import Testing

/// Delivery and observers on a thread inside `read { }` after another process grew the map, and
/// handles of one path opened and closed under load (found by the third concurrency audit; the
/// first three tests failed in every run before their fixes).
@Suite(.serialized) struct DeliveryInsideReadTests {
    static let counter = PersistentDefaults.Key<Int>("counter", default: 0)
    /// Bounded durability with a long interval: these tests are about delivery, not syncs.
    static var bounded: PersistentDefaults.Options {
        var options = PersistentDefaults.Options()
        options.durability = .bounded(interval: .seconds(10))
        return options
    }

    /// Stores whose delivery never ended (a failed run): kept open, since closing one would wait
    /// for that delivery for ever.
    static let leaked = Guarded<[any Sendable]>([])

    /// A thread sets a key inside `read { }` and delivers that commit itself (its observer's
    /// callback runs on it). Meanwhile another thread commits (the delivering thread takes that
    /// delivery over) and another process grows the map. The delivering thread then reads the log
    /// for the other thread's commit: the read cannot begin (`MDB_MAP_RESIZED`), so it is answered
    /// from the enclosing `read { }` snapshot, which holds neither commit; delivery never advances
    /// and `nextWork` hands out the same work for ever: the thread spins, `set` never returns, its
    /// `read { }` never ends, and every other reader of the store waits to adopt the map.
    @Test func aDeliveryInsideReadAfterAnotherProcessGrewTheMapEnds() throws {
        try withTemporaryStore(options: Self.bounded) { store, path, log throws in
            store[Self.counter] = 1
            let seen = Events<String>()
            let inCallback = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let token = store.observe(Self.counter) { change in
                seen.append("\(change.oldValue)→\(change.newValue)")
                if change.newValue == 2 {
                    inCallback.signal()
                    _ = release.wait(timeout: .now() + 30)
                }
            }
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                do {
                    try store.read { _ in try store.set(2, for: Self.counter) }
                } catch {
                    Issue.record("set inside read: \(error)")
                }
                done.signal()
            }
            #expect(inCallback.wait(timeout: .now() + 10) == .success)
            // The other thread delivers: this commit's delivery is left to it.
            try store.set(3, for: Self.counter)
            try growTheMapFromAnotherProcess(path)
            release.signal()
            let ended = done.wait(timeout: .now() + 10) == .success
            #expect(ended, "set inside read { } never returned: its delivery loops on the enclosing snapshot")
            guard ended else {
                Self.leaked.withLock { $0 += [store, token] }
                return
            }
            #expect(seen.wait(forCount: 2))
            #expect(seen.all == ["1→2", "2→3"])
            #expect(log.all.isEmpty, "\(log.all)")
            token.cancel()
        }
    }

    /// A key observer registered inside `read { }` after another process grew the map starts at
    /// the scope's snapshot and must get every change after it, each once, in order. While the
    /// registration happens, the watcher is in the middle of a batch of records (blocked in another
    /// observer's callback for the first one). The rest of that batch is dispatched to the new
    /// observer too, from its old baseline: it gets one merged change (3→5) instead of 3→4 and
    /// 4→5, and the replay that follows skips those records for it (its position has moved).
    @Test func aKeyObserverRegisteredInsideReadGetsEachChangeOnce() throws {
        try withTemporaryStore { store, path, log throws in
            store[Self.counter] = 1
            let firstSeen = Events<Int>()
            let reached = [3: DispatchSemaphore(value: 0), 4: DispatchSemaphore(value: 0)]
            let release = [3: DispatchSemaphore(value: 0), 4: DispatchSemaphore(value: 0)]
            let first = store.observe(Self.counter) { change in
                firstSeen.append(change.newValue)
                if let reached = reached[change.newValue] {
                    reached.signal()
                    _ = release[change.newValue]!.wait(timeout: .now() + 30)
                }
            }
            try setFromAnotherProcess(path, "counter", 3)
            // The watcher is in the first observer's callback for 3.
            #expect(reached[3]!.wait(timeout: .now() + 10) == .success)
            let late = Events<String>()
            var lateToken: ObservationToken?
            try store.read { snapshot in
                #expect(snapshot[Self.counter] == 3)
                try setFromAnotherProcess(path, "counter", 4)
                try setFromAnotherProcess(path, "counter", 5)
                release[3]!.signal()
                // The watcher read 4 and 5 in one batch and is in the callback for 4.
                #expect(reached[4]!.wait(timeout: .now() + 10) == .success)
                try growTheMapFromAnotherProcess(path)
                lateToken = store.observe(Self.counter) { change in
                    late.append("\(change.oldValue)→\(change.newValue)")
                }
            }
            release[4]!.signal()
            try setFromAnotherProcess(path, "counter", 8)
            #expect(firstSeen.wait(forCount: 4))
            #expect(firstSeen.all == [3, 4, 5, 8])
            _ = late.wait(forCount: 3, timeout: 5)
            #expect(late.all == ["3→4", "4→5", "5→8"])
            #expect(log.all.isEmpty, "\(log.all)")
            first.cancel()
            lateToken?.cancel()
        }
    }
    /// The replay of a key observer registered inside `read { }` (after another process grew
    /// the map) is taken by the thread that registers it when that thread is delivering: here a
    /// callback of its own (second) commit, made in the scope before the growth. That delivery reads the
    /// records to replay from the enclosing snapshot, which does not hold them, clears
    /// `replayFrom` and ends: the observer never gets the change it started before (1→2), and
    /// its next change arrives with the wrong old value (1→5).
    @Test func aReplayTakenInsideTheScopeIsNotLost() throws {
        try withTemporaryStore(options: Self.bounded) { store, path, log throws in
            store[Self.counter] = 1
            let inCallback = DispatchSemaphore(value: 0)
            let grown = DispatchSemaphore(value: 0)
            let late = Events<String>()
            let lateToken = Guarded<ObservationToken?>(nil)
            let token = store.observe(Self.counter) { change in
                guard change.newValue == 2 else { return }
                inCallback.signal()
                _ = grown.wait(timeout: .now() + 30)
                let observation = store.observe(Self.counter) { change in
                    late.append("\(change.oldValue)→\(change.newValue)")
                }
                lateToken.withLock { $0 = observation }
            }
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                do {
                    try store.read { _ in
                        // Two commits in the scope: the replay spans more than the commit in hand.
                        try store.set(1, for: PersistentDefaults.Key<Int>("other", default: 0))
                        try store.set(2, for: Self.counter)
                    }
                } catch {
                    Issue.record("set inside read: \(error)")
                }
                done.signal()
            }
            #expect(inCallback.wait(timeout: .now() + 10) == .success)
            try growTheMapFromAnotherProcess(path)
            grown.signal()
            let ended = done.wait(timeout: .now() + 10) == .success
            #expect(ended)
            guard ended else {
                Self.leaked.withLock { $0 += [store, token] }
                return
            }
            try setFromAnotherProcess(path, "counter", 5)
            _ = late.wait(forCount: 2, timeout: 5)
            #expect(late.all == ["1→2", "2→5"])
            #expect(log.all.isEmpty, "\(log.all)")
            token.cancel()
            lateToken.withLock { $0?.cancel() }
        }
    }
    /// Stress: threads open and close handles of one path (the last close closes the store)
    /// while each observes, commits and reads, and another process writes. Every observer sees
    /// its key's changes in sequence order; no error is reported; nothing hangs.
    @Test func openingAndClosingOnePathFromManyThreadsWhileObserving() throws {
        try withTemporaryDirectory { path throws in
            let errors = Guarded<[String]>([])
            let options = {
                var options = PersistentDefaults.Options()
                options.durability = .bounded(interval: .milliseconds(5))
                options.errorHandler = { error in errors.withLock { $0.append("\(error)") } }
                return options
            }()
            do { _ = try PersistentDefaults(path: path, options: options) }
            let writer = try ChildProcess(fixture: ["set-loop", path, "1"])
            defer { _ = writer.kill() }
            #expect(writer.wait(for: "ack 0 20"))
            let problems = Guarded<[String]>([])
            let deadline = Date().addingTimeInterval(8)
            let finished = DispatchGroup()
            for thread in 0..<4 {
                finished.enter()
                Thread.detachNewThread {
                    defer { finished.leave() }
                    let key = PersistentDefaults.Key<Int>("t\(thread)", default: 0)
                    var round = 0
                    while Date() < deadline {
                        round += 1
                        do {
                            let store = try PersistentDefaults(path: path, options: options)
                            let sequences = Guarded<[UInt64]>([])
                            let token = store.observe(key) { change in sequences.withLock { $0.append(change.sequence) }
                            }
                            let k0 = store.observe(PersistentDefaults.Key<Int>("k0", default: 0)) { _ in }
                            for value in 0..<5 { try store.set(round * 10 + value, for: key) }
                            _ = try store.read { $0[key] }
                            let seen = sequences.withLock { $0 }
                            if seen != seen.sorted() || Set(seen).count != seen.count {
                                problems.withLock { $0.append("thread \(thread) round \(round): \(seen)") }
                            }
                            token.cancel()
                            if round % 2 == 0 { k0.cancel() }
                        } catch {
                            problems.withLock { $0.append("thread \(thread): \(error)") }
                        }
                    }
                }
            }
            #expect(finished.wait(timeout: .now() + 60) == .success, "a thread hung")
            #expect(problems.withLock { $0 }.isEmpty, "\(problems.withLock { $0.prefix(5) })")
            #expect(errors.withLock { $0 }.isEmpty, "\(errors.withLock { $0.prefix(5) })")
        }
    }
}
