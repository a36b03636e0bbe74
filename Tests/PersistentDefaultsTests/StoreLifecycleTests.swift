import Foundation
import PDTestSupport
import PersistentDefaults
import Synchronization
import Testing

/// A store's close in this process, and the app's code that runs around it.
@Suite struct StoreLifecycleTests {
    /// Runs the fixture under strace with every `fdatasync` failing (EIO): the child's background
    /// and closing flushes fail and reach its error handler.
    static func fixtureWithFailingSyncs(_ arguments: [String]) throws -> ChildProcess {
        try ChildProcess(
            URL(fileURLWithPath: "/usr/bin/strace"),
            ["-f", "-qq", "-o", "/dev/null", "-e", "trace=fdatasync", "-e", "inject=fdatasync:error=EIO"]
                + [Products.fixture.path] + arguments, errors: .merged)
    }

    /// Every open and close of a store in this process runs under one lock (lmdb.h: a store must
    /// not be open twice in one process). An open of an existing store for writing must therefore
    /// not wait for LMDB's writer lock: while another process held a write transaction, the open
    /// waited for it to end, and with it every other open and close in this process.
    @Test func aWritableOpenDoesNotWaitForAnotherProcesssWrite() throws {
        try withTemporaryDirectory { path throws in
            let key = PersistentDefaults.Key<Int>("k", default: 0)
            try PersistentDefaults(path: path).set(7, for: key)  // The handle goes at once: closed.
            let writer = try ChildProcess(fixture: ["hold-write", path])
            defer { _ = writer.kill() }
            #expect(writer.wait(for: "holding"))
            let opened = DispatchSemaphore(value: 0)
            let result = Guarded<Result<Int, any Error>?>(nil)
            Thread.detachNewThread {
                result.withLock { $0 = Result { try PersistentDefaults(path: path).value(for: key) } }
                opened.signal()
            }
            let openedWhileWriting = opened.wait(timeout: .now() + 10) == .success
            #expect(openedWhileWriting, "the open waited for the other process's write transaction")
            if !openedWhileWriting {
                _ = writer.kill()
                _ = opened.wait(timeout: .now() + 30)
            }
            #expect(try result.withLock { try $0?.get() } == 7)
            // The writer's end frees LMDB's lock for this process's writes.
            _ = writer.kill()
            let store = try PersistentDefaults(path: path)
            try store.set(8, for: key)
            #expect(try store.value(for: key) == 8)
        }
    }

    /// Opens and last closes ran under one process-wide lock, so a store's creation that waited
    /// for LMDB's writer lock — another process writing in the new environment — held up every
    /// open and close of every other store in this process until that write ended. A second open
    /// of the store being created waits for the creation and shares its store.
    @Test func aStoreCreationWaitingForAnotherProcesssWriteHoldsUpNoOtherStore() throws {
        try withTemporaryDirectory { base throws in
            let slow = base + "/slow"
            try FileManager.default.createDirectory(atPath: slow, withIntermediateDirectories: true)
            let writer = try ChildProcess(fixture: ["hold-raw-write", slow])
            defer { _ = writer.kill() }
            #expect(writer.wait(for: "holding"))

            // Two opens of the new store: one creates it and waits for LMDB's writer lock, the
            // other waits for that open.
            let threads = Guarded<[String]>([])
            let results = Guarded<[Result<Void, any Error>]>([])
            let created = DispatchSemaphore(value: 0)
            for index in 0..<2 {
                Thread.detachNewThread {
                    threads.withLock { $0.append(Self.currentThreadDirectory()) }
                    let result = Result {
                        try PersistentDefaults(path: slow).set(
                            index + 1, for: PersistentDefaults.Key<Int>("k\(index)", default: 0))
                    }
                    results.withLock { $0.append(result) }
                    created.signal()
                }
            }
            #expect(Self.waitUntilBlocked(threads: threads, count: 2), "the opens did not reach a wait")

            // Meanwhile other stores open, write and close; a `.bounded` one's close syncs.
            let others = DispatchSemaphore(value: 0)
            let othersResult = Guarded<Result<Void, any Error>?>(nil)
            Thread.detachNewThread {
                othersResult.withLock { result in
                    result = Result {
                        var bounded = PersistentDefaults.Options()
                        bounded.durability = .bounded(interval: .seconds(3600))
                        for (name, options) in [("durable", PersistentDefaults.Options()), ("bounded", bounded)] {
                            let key = PersistentDefaults.Key<Int>("k", default: 0)
                            try PersistentDefaults(path: base + "/" + name, options: options).set(5, for: key)
                            let again = try PersistentDefaults(path: base + "/" + name, options: options)
                            guard again[key] == 5 else { throw CocoaError(.fileReadCorruptFile) }
                        }
                    }
                }
                others.signal()
            }
            let othersFinished = others.wait(timeout: .now() + 10) == .success
            #expect(othersFinished, "other stores' opens waited for the creation of another")
            #expect(results.withLock { $0.isEmpty }, "a creation finished while another process held the writer lock")
            _ = writer.kill()
            if !othersFinished { _ = others.wait(timeout: .now() + 30) }
            #expect(throws: Never.self) { try othersResult.withLock { try $0?.get() } }

            for _ in 0..<2 { #expect(created.wait(timeout: .now() + 30) == .success) }
            for result in results.withLock({ $0 }) { #expect(throws: Never.self) { try result.get() } }
            let store = try PersistentDefaults(path: slow)
            #expect(store[PersistentDefaults.Key<Int>("k0", default: 0)] == 1)
            #expect(store[PersistentDefaults.Key<Int>("k1", default: 0)] == 2)
        }
    }

    /// 12 threads (on 2 cores) race to create, open, write and close 4 stores in empty
    /// directories, through two paths each (the directory and a symbolic link to it), so opens meet
    /// creations and last closes of the same store: each store is opened once at a time (its
    /// lock file is open at most once), and every acknowledged write is there at the end.
    @Test func racingCreationsOpensAndClosesOfNewStoresShareOneStoreEach() throws {
        try withTemporaryDirectory { base throws in
            let stores = 4
            try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
            let directories = (0..<stores).map { base + "/s\($0)" }
            let links = (0..<stores).map { base + "/l\($0)" }
            for index in 0..<stores {
                try FileManager.default.createDirectory(atPath: directories[index], withIntermediateDirectories: false)
                try FileManager.default.createSymbolicLink(
                    atPath: links[index], withDestinationPath: directories[index])
            }
            let (threads, rounds) = (12, 40)
            let lastValues = Guarded([[Int]](repeating: [Int](repeating: 0, count: stores), count: threads))
            let failures = Events<String>()
            let doubleOpens = Events<String>()
            let done = DispatchGroup()
            for thread in 0..<threads {
                done.enter()
                Thread.detachNewThread {
                    defer { done.leave() }
                    let own = PersistentDefaults.Key<Int>("t\(thread)", default: 0)
                    for round in 1...rounds {
                        let index = (thread + round) % stores
                        let path = round.isMultiple(of: 2) ? directories[index] : links[index]
                        do {
                            let store = try PersistentDefaults(path: path)
                            try store.set(round, for: own)
                            lastValues.withLock { $0[thread][index] = round }
                            if store[own] != round {
                                failures.append("thread \(thread) read \(store[own]) for \(round)")
                            }
                            for open in Self.lockFilesOpenTwice(under: base) { doubleOpens.append(open) }
                        } catch {
                            failures.append("thread \(thread) round \(round): \(error)")
                        }
                    }
                }
            }
            #expect(done.wait(timeout: .now() + 120) == .success)
            #expect(failures.all.isEmpty, "\(failures.all.prefix(5))")
            #expect(doubleOpens.all.isEmpty, "a lock file open twice: \(doubleOpens.all.prefix(5))")
            let expected = lastValues.withLock { $0 }
            for index in 0..<stores {
                let store = try PersistentDefaults(path: directories[index])
                for thread in 0..<threads {
                    #expect(store[PersistentDefaults.Key<Int>("t\(thread)", default: 0)] == expected[thread][index])
                }
            }
        }
    }

    /// The calling thread's directory in `/proc` ("PID/task/TID").
    static func currentThreadDirectory() -> String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")) ?? "self"
    }

    /// Waits (up to 10 s) until `count` threads have registered their `/proc` directories in
    /// `threads` and each is in a `futex` wait (its `syscall` file starts with 202, x86-64's
    /// `futex`): blocked on a lock or a condition.
    static func waitUntilBlocked(threads: Guarded<[String]>, count: Int) -> Bool {
        eventually(timeout: 10) {
            let ids = threads.withLock { $0 }
            return ids.count == count
                && ids.allSatisfy { id in
                    let state = try? String(contentsOfFile: "/proc/\(id)/syscall", encoding: .utf8)
                    return state?.hasPrefix("202 ") == true
                }
        }
    }

    /// Makes a store at `path` whose lock file has `maxReaders` slots and whose "k" holds 7, and
    /// closes it; returns the options it was made with and the key.
    static func storeHolding7(at path: String, maxReaders: Int) throws
        -> (PersistentDefaults.Options, PersistentDefaults.Key<Int>)
    {
        var options = PersistentDefaults.Options()
        options.maxReaders = maxReaders
        let key = PersistentDefaults.Key<Int>("k", default: 0)
        try PersistentDefaults(path: path, options: options).set(7, for: key)  // Closed at once.
        return (options, key)
    }

    /// A writable open needs no reader slot: LMDB's write transaction takes none. While other
    /// processes' reads held every slot of the reader table, the open (which reads first)
    /// failed with readersFull, though this process could write.
    @Test func aWritableOpenSucceedsWhileOtherProcessesHoldEveryReaderSlot() throws {
        try withTemporaryDirectory { path throws in
            let (options, key) = try Self.storeHolding7(at: path, maxReaders: 2)
            let holders = try (0..<2).map { _ in
                try ChildProcess(fixture: ["hold-read", path], environment: ["PD_MAX_READERS": "2"])
            }
            defer { for holder in holders { _ = holder.kill() } }
            for holder in holders { #expect(holder.wait(for: "holding")) }
            let store = try PersistentDefaults(path: path, options: options)
            try store.set(8, for: key)
            #expect(try store.write { $0[key] } == 8)  // A write transaction reads without a slot.
        }
    }

    /// Threads that read once and then sit idle (a thread pool, a thread per connection) keep a
    /// reader slot each, up to a quarter of the table per process: four such processes filled
    /// the table, and every read of every other process failed with readersFull for as long as
    /// they lived (`pdinspect get` too), `store[key]` giving the default instead of the stored
    /// value. Now each process empties its slots that stay idle (one to two seconds), and a read
    /// that finds the table full waits for a slot (`readerSlotWait`, 3 s by default).
    @Test func idleReadersOfOtherProcessesLeaveSlotsForNewReaders() throws {
        try withTemporaryDirectory { path throws in
            let (options, key) = try Self.storeHolding7(at: path, maxReaders: 8)
            // One after another, so that each finds two free slots: each keeps two (a quarter of
            // the table), and the four fill it.
            var processes: [ChildProcess] = []
            defer { for process in processes { _ = process.kill() } }
            for _ in 0..<4 {
                let process = try ChildProcess(
                    fixture: ["idle-readers", path, "2"], environment: ["PD_MAX_READERS": "8"])
                processes.append(process)
                #expect(process.wait(for: "idle, 0 reads failed"), "\(process.text)")
            }
            let store = try PersistentDefaults(path: path, options: options)
            #expect(try store.value(for: key) == 7)
            let others = Guarded<Int?>(nil)
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                others.withLock { $0 = try? store.value(for: key) }
                done.signal()
            }
            #expect(done.wait(timeout: .now() + 30) == .success)
            #expect(others.withLock { $0 } == 7)
        }
    }

    @Test func aStoreReleasedByItsErrorHandlerOnTheFlushQueueCloses() throws {
        try withTemporaryDirectory { path in
            // Made here: the child's open then syncs nothing, and its first fdatasync is the flush's.
            _ = try PersistentDefaults(path: path)
            let child = try Self.fixtureWithFailingSyncs(["release-in-flush-handler", path])
            #expect(child.wait(for: "reopened 1", timeout: 30), "\(child.text)")
            #expect(child.waitForExit(timeout: 30))
            #expect(child.result.status == 0, "\(child.text)")
        }
    }

    @Test func anErrorHandlerMayOpenAStoreWhenTheClosingFlushFails() throws {
        try withTemporaryDirectory { base in
            let (path, other) = (base + "/store", base + "/log")
            _ = try (PersistentDefaults(path: path), PersistentDefaults(path: other))
            let child = try Self.fixtureWithFailingSyncs(["open-in-close-flush-handler", path, other])
            #expect(child.wait(for: "handled", timeout: 30), "\(child.text)")
            #expect(child.waitForExit(timeout: 30))
            #expect(child.result.status == 0, "\(child.text)")
        }
    }

    static let counter = PersistentDefaults.Key<Int>("counter", default: 0)

    @Test func aStoreWhoseDirectoryWasReplacedIsOpenedAnew() throws {
        try withTemporaryDirectory { path in
            let old = try PersistentDefaults(path: path)
            old[Self.counter] = 1
            // Removed (a reset to defaults, a restore) while a handle of the old store lives on.
            try FileManager.default.removeItem(atPath: path)
            let new = try PersistentDefaults(path: path)
            #expect(FileManager.default.fileExists(atPath: path + "/data.mdb"), "the new store is on disk")
            #expect(new[Self.counter] == 0)
            new[Self.counter] = 2
            #expect(try PersistentDefaults(path: path)[Self.counter] == 2)
            #expect(old[Self.counter] == 1, "the old handle keeps its store")
        }
    }

    /// A handle opened through the new path of a renamed directory gave, as its `path`, the
    /// path the store was first opened with, which no longer exists: opening the store again by
    /// that path (as another component given the handle's path does) made a new, empty store there.
    @Test func aHandleOpenedAfterItsDirectoryWasRenamedGivesTheNewPath() throws {
        try withTemporaryDirectory { base in
            let store = try PersistentDefaults(path: base + "/before")
            store[Self.counter] = 1
            try FileManager.default.moveItem(atPath: base + "/before", toPath: base + "/after")
            let again = try PersistentDefaults(path: base + "/after")
            let after = try #require(realpath(base + "/after", nil))
            defer { free(after) }
            #expect(again.path == String(cString: after))
            let byPath = try PersistentDefaults(path: again.path)
            #expect(byPath[Self.counter] == 1)
            #expect(!FileManager.default.fileExists(atPath: base + "/before"), "a new store at the old path")
            #expect(store.path != again.path, "each handle gives the path it was opened with")
        }
    }

    @Test func aStoreWhoseDirectoryWasRenamedIsTheOpenStoreAtItsNewPath() throws {
        try withTemporaryDirectory { base in
            var bounded = PersistentDefaults.Options()
            bounded.durability = .bounded(interval: .seconds(10))
            let store = try PersistentDefaults(path: base + "/before", options: bounded)
            store[Self.counter] = 1
            try FileManager.default.moveItem(atPath: base + "/before", toPath: base + "/after")
            // The same files: one environment in the process (lmdb.h), so another durability is refused.
            #expect(throws: PersistentDefaultsError.self) { try PersistentDefaults(path: base + "/after") }
            let again = try PersistentDefaults(path: base + "/after", options: bounded)
            again[Self.counter] += 1
            #expect(store[Self.counter] == 2)
        }
    }
}

/// Opening, using and dropping handles from many threads at once, while other processes write.
extension StoreLifecycleTests {
    /// The files under `directory` that this process has open (`/proc/self/fd`) or mapped
    /// (`/proc/self/maps`), one entry per descriptor or mapping.
    static func openFiles(under directory: String) -> (descriptors: [String], mappings: [String]) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        let descriptors = names.compactMap { name in
            try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + name)
        }.filter { $0.hasPrefix(directory + "/") }
        let maps = (try? String(contentsOfFile: "/proc/self/maps", encoding: .utf8)) ?? ""
        let mappings = maps.split(separator: "\n").compactMap { line in
            line.split(separator: " ", omittingEmptySubsequences: true).last.map(String.init)
        }.filter { $0.hasPrefix(directory + "/") }
        return (descriptors, mappings)
    }

    /// The lock files under `directory` that this process has open more than once, each with its
    /// descriptor numbers. A listing is not atomic (a descriptor closed and its number reused by
    /// another open between the listing and the link's read shows one file twice), so a lock
    /// file counts as open twice only when three listings in a row show it under the same numbers.
    static func lockFilesOpenTwice(under directory: String) -> [String] {
        let listings = (0..<3).map { _ in lockFileDescriptors(under: directory) }
        return listings[0].compactMap { path, numbers in
            numbers.count > 1 && listings.allSatisfy({ $0[path] == numbers }) ? "\(path) \(numbers)" : nil
        }
    }

    /// The descriptor numbers of this process that lead to a `lock.mdb` under `directory`, by path.
    static func lockFileDescriptors(under directory: String) -> [String: Set<String>] {
        var found: [String: Set<String>] = [:]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
            guard let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + name),
                path.hasPrefix(directory + "/"), path.hasSuffix("/lock.mdb")
            else { continue }
            found[path, default: []].insert(name)
        }
        return found
    }

    /// The last handle released by an observer callback on the store's watcher thread (another
    /// process's commit): the store closes there, with the delivery it runs in still under way.
    @Test func theLastHandleReleasedByACallbackOnTheWatcherThreadClosesTheStore() throws {
        try withTemporaryDirectory { path throws in
            let log = ErrorLog()
            var options = PersistentDefaults.Options()
            options.errorHandler = { log.append($0) }
            let holder = Guarded<PersistentDefaults?>(try PersistentDefaults(path: path, options: options))
            let released = DispatchSemaphore(value: 0)
            let token = try #require(holder.withLock { $0 }).observe(Self.counter) { _ in
                let handle = holder.withLock { handle in
                    defer { handle = nil }
                    return handle
                }
                withExtendedLifetime(handle) {}
                released.signal()
            }
            #expect(try runFixture(["increment", path, "counter", "3"]).status == 0)
            #expect(released.wait(timeout: .now() + 10) == .success)
            let cleared = eventually(timeout: 10) {
                let left = Self.openFiles(under: path)
                return left.descriptors.isEmpty && left.mappings.isEmpty
            }
            #expect(cleared, "\(Self.openFiles(under: path))")
            let reopened = try PersistentDefaults(path: path, options: options)
            #expect(try reopened.value(for: Self.counter) == 3)
            #expect(log.all.isEmpty, "\(log.all)")
            token.cancel()
        }
    }

    /// The last handle released by the error handler on the store's watcher thread: another
    /// process stored bytes that do not decode as the observed key's type, which the delivery
    /// reports there; the store closes inside the handler, with that delivery still under way.
    @Test func theLastHandleReleasedByTheErrorHandlerOnTheWatcherThreadClosesTheStore() throws {
        try withTemporaryDirectory { path throws in
            let holder = Guarded<PersistentDefaults?>(nil)
            let reports = Events<PersistentDefaultsError>()
            var options = PersistentDefaults.Options()
            options.errorHandler = { error in
                let handle = holder.withLock { handle in
                    defer { handle = nil }
                    return handle
                }
                withExtendedLifetime(handle) {}
                reports.append(error)
            }
            holder.withLock { $0 = try? PersistentDefaults(path: path, options: options) }
            let token = try #require(holder.withLock { $0 }).observe(Self.counter) { _ in }
            #expect(try runFixture(["set-bytes", path, "counter", "16"]).status == 0)
            #expect(reports.wait(forCount: 1))
            #expect(reports.all.first?.isDecodingFailure == true, "\(reports.all)")
            let cleared = eventually(timeout: 10) {
                let left = Self.openFiles(under: path)
                return left.descriptors.isEmpty && left.mappings.isEmpty
            }
            #expect(cleared, "\(Self.openFiles(under: path))")
            let reopened = try PersistentDefaults(path: path)
            #expect(try reopened.value(for: PersistentDefaults.Key<Data>("counter", default: Data())).count == 16)
            #expect(reports.all.count == 1, "\(reports.all)")
            token.cancel()
        }
    }

    /// The last handle's release ends the store's `updates` streams: each stream's end cancels its
    /// observer, which lets go of the key and whatever it holds — user code (here the key's
    /// default, a class instance whose `deinit` opens and closes another store). That ran under
    /// the lock that every open and close in the process takes, so the `deinit`'s open waited for
    /// its own thread's lock for ever (before the fix, 3 of 3 runs: the release did not return
    /// within 5 s). The streams end, and a `for await` loop that ends with them opens a store too.
    @Test func closingAStoreEndsItsStreamsAfterTheRegistryLock() async throws {
        try await withTemporaryDirectoryAsync { base in
            let other = base + "/other"
            let released = Events<Bool>()
            let holder = Guarded<PersistentDefaults?>(nil)
            let (markers, counts) = try { () throws -> (AsyncStream<Marker>, AsyncStream<Int>) in
                let store = try PersistentDefaults(path: base + "/store")
                // Stored, so that the stream's first value is a decoded instance, not the default.
                try store.set(Marker(number: 1), for: PersistentDefaults.Key("marker", default: Marker(number: 0)))
                holder.withLock { $0 = store }
                // The key lives only in the stream's observer: the default goes when the observer does.
                let markers = store.updates(
                    for: PersistentDefaults.Key<Marker>(
                        "marker",
                        default: Marker(number: 0) {
                            released.append((try? PersistentDefaults(path: other)) != nil)
                        }))
                return (markers, store.updates(for: Self.counter))
            }()
            let closed = returns(within: 5) {
                let last = holder.withLock { handle in
                    defer { handle = nil }
                    return handle
                }
                withExtendedLifetime(last) {}
            }
            #expect(closed, "the release of the last handle deadlocked")
            guard closed else { return }
            // The default went on the releasing thread, before the release returned.
            #expect(released.all == [true])
            var numbers: [Int] = []
            for await marker in markers { numbers.append(marker.number) }
            #expect(numbers == [1])
            var counted: [Int] = []
            for await count in counts { counted.append(count) }
            #expect(counted == [0])
            // The loops ended with the store: open another one.
            #expect((try? PersistentDefaults(path: other)) != nil)
        }
    }

    /// Opens refused for what the directory holds (another LMDB environment, a newer format, an
    /// empty environment that may not be created, random bytes, a full reader table for a
    /// read-only open), made again and again while another thread writes and reads another
    /// store: each leaves no descriptor or mapping behind, and the other store works on.
    @Test func refusedOpensLeaveNothingOpenWhileAnotherStoreIsInUse() throws {
        try withTemporaryDirectory { base throws in
            let (foreign, newer, empty) = try refusedStoreDirectories(in: base)
            let random = base + "/random"
            try FileManager.default.createDirectory(atPath: random, withIntermediateDirectories: true)
            let bytes = Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 7919) })
            #expect(FileManager.default.createFile(atPath: random + "/data.mdb", contents: bytes))
            let full = base + "/full"
            var twoReaders = PersistentDefaults.Options()
            twoReaders.maxReaders = 2
            try PersistentDefaults(path: full, options: twoReaders).set(1, for: Self.counter)
            let holders = try (0..<2).map { _ in
                try ChildProcess(fixture: ["hold-read", full], environment: ["PD_MAX_READERS": "2"])
            }
            defer { for holder in holders { holder.kill() } }
            for holder in holders { #expect(holder.wait(for: "holding")) }
            var existingOnly = PersistentDefaults.Options()
            existingOnly.createIfMissing = false
            var readOnly = PersistentDefaults.Options()
            readOnly.readOnly = true
            let refused: [(String, PersistentDefaults.Options)] = [
                (foreign, .init()), (newer, .init()), (empty, existingOnly), (random, .init()), (full, readOnly),
            ]

            let user = base + "/user"
            let stop = Atomic<Bool>(false)
            let failures = Events<String>()
            let used = DispatchSemaphore(value: 0)
            let writing = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                defer { used.signal() }
                do {
                    let store = try PersistentDefaults(path: user)
                    var value = 0
                    while !stop.load(ordering: .relaxed) {
                        value += 1
                        try store.set(value, for: Self.counter)
                        if try store.read({ $0[Self.counter] }) != value { failures.append("read back \(value)") }
                        if value == 1 { writing.signal() }
                    }
                } catch {
                    failures.append("\(error)")
                }
            }
            #expect(writing.wait(timeout: .now() + 10) == .success)
            var refusals = 0
            for _ in 0..<20 {
                for (path, options) in refused {
                    do {
                        _ = try PersistentDefaults(path: path, options: options)
                        failures.append("\(path) opened")
                    } catch {
                        refusals += 1
                    }
                }
            }
            stop.store(true, ordering: .relaxed)
            #expect(used.wait(timeout: .now() + 10) == .success)
            #expect(refusals == 20 * refused.count)
            #expect(failures.all.isEmpty, "\(failures.all)")
            for (path, _) in refused {
                let left = Self.openFiles(under: path)
                #expect(left.descriptors.isEmpty && left.mappings.isEmpty, "\(left)")
            }
            // Nothing held: a writable open of the same directories gives the same answers.
            for (path, _) in refused where path != full {
                #expect(throws: PersistentDefaultsError.self) {
                    try PersistentDefaults(path: path, options: existingOnly)
                }
            }
            #expect(try PersistentDefaults(path: user).value(for: Self.counter) > 0)
        }
    }

    /// `PersistentDefaults.standard` first used by 16 threads at once (in a child process, whose
    /// standard store is its own): one store for all, every write counted; when its path cannot
    /// hold a store, one stand-in for all and the error handler told once.
    @Test func theStandardStoreFirstUsedByManyThreadsAtOnceIsOneStore() throws {
        try withTemporaryDirectory { base throws in
            try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
            let file = base + "/file"
            #expect(FileManager.default.createFile(atPath: file, contents: Data("not a store".utf8)))
            for (path, expected) in [
                (base + "/store", "stores 1 handled 0 counter 16 temporary false"),
                (file, "stores 1 handled 1 counter 16 temporary true"),
            ] {
                let result = try runFixture(["standard-threads", path, "16"])
                #expect(result.status == 0, "\(result.output)")
                #expect(result.output.contains(expected), "\(result.output)")
            }
        }
    }

    /// What one worker thread did and saw.
    struct WorkerTally: Sendable {
        /// Per store: the last value this thread set its own key to (acknowledged sets).
        var ownValues = [0, 0, 0]
        /// Per store: the increments of "shared" this thread committed.
        var sharedIncrements = [0, 0, 0]
        /// Values too large for `maxValueSize`, set through the subscript (each reported).
        var oversizedSets = 0
        var failures: [String] = []
    }

    /// 16 threads (on 2 cores) open, use and drop handles of 3 stores (2 `.sync`, 1 `.bounded`),
    /// handles are also released by observer callbacks and by the error handler, while one
    /// process sets keys in a loop and another holds write transactions of 100 ms. Every
    /// acknowledged write must be there, every count exact, no open may hang or fail, only one
    /// LMDB environment per store may be open in this process at any moment (lmdb.h: a second
    /// one's close drops the first one's locks), and nothing of the stores may stay open.
    @Test func manyThreadsOpenUseAndDropHandlesWhileOtherProcessesWrite() throws {
        try withTemporaryDirectory { base throws in
            let paths = (0..<3).map { base + "/s\($0)" }
            let shared = PersistentDefaults.Key<Int>("shared", default: 0)
            let blob = PersistentDefaults.Key<Data>("blob", default: Data())
            // Handles that the error handler releases, one per store.
            let releasedByHandler = Guarded<[PersistentDefaults?]>([nil, nil, nil])
            let reports = Counter()
            @Sendable func options(_ index: Int) -> PersistentDefaults.Options {
                var options = PersistentDefaults.Options()
                if index == 2 { options.durability = .bounded(interval: .milliseconds(5)) }
                options.maxValueSize = 1024
                options.errorHandler = { _ in
                    reports.increment()
                    let handle = releasedByHandler.withLock { handles in
                        defer { handles[index] = nil }
                        return handles[index]
                    }
                    withExtendedLifetime(handle) {}  // Released here, in the handler, outside the lock.
                }
                return options
            }
            for index in 0..<3 { _ = try PersistentDefaults(path: paths[index], options: options(index)) }
            let before = Self.openFiles(under: base)
            #expect(before.descriptors.isEmpty && before.mappings.isEmpty, "\(before)")

            let setter = try ChildProcess(fixture: ["set-loop", paths[0], "2"])
            defer { setter.kill() }
            let holder = try ChildProcess(fixture: ["hold-writes", paths[1], "100"])
            defer { holder.kill() }
            #expect(setter.wait(for: "ack 1 1"))
            #expect(holder.wait(for: "holding"))

            // Watches that each store's lock file is open at most once in this process.
            let sampling = Atomic<Bool>(true)
            let doubleOpens = Events<String>()
            let sampled = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                while sampling.load(ordering: .relaxed) {
                    for open in Self.lockFilesOpenTwice(under: base) { doubleOpens.append(open) }
                }
                sampled.signal()
            }

            let (threads, rounds) = (16, 12)
            let tallies = Guarded([WorkerTally](repeating: WorkerTally(), count: threads))
            let done = DispatchGroup()
            for thread in 0..<threads {
                done.enter()
                Thread.detachNewThread {
                    defer { done.leave() }
                    var tally = WorkerTally()
                    let own = PersistentDefaults.Key<Int>("t\(thread)", default: 0)
                    for round in 0..<rounds {
                        let index = (thread + round) % 3
                        do {
                            let store = try PersistentDefaults(path: paths[index], options: options(index))
                            // A second handle, released by the observer's first call (or below).
                            let extra = Guarded<PersistentDefaults?>(
                                try PersistentDefaults(path: paths[index], options: options(index)))
                            let token = store.observe(own) { _ in
                                let handle = extra.withLock { handle in
                                    defer { handle = nil }
                                    return handle
                                }
                                withExtendedLifetime(handle) {}
                            }
                            let next = tally.ownValues[index] + 1
                            try store.set(next, for: own)
                            tally.ownValues[index] = next
                            let read = try store.read { $0[own] }
                            if read != next {
                                tally.failures.append("store \(index): read \(read) after setting \(next)")
                            }
                            try store.write { $0[shared] += 1 }
                            tally.sharedIncrements[index] += 1
                            let handle = try PersistentDefaults(path: paths[index], options: options(index))
                            releasedByHandler.withLock { $0[index] = handle }
                            store[blob] = Data(count: 2048)  // Too large: reported, and the handler releases.
                            tally.oversizedSets += 1
                            if round.isMultiple(of: 2) { token.cancel() }
                        } catch {
                            tally.failures.append("store \(index), round \(round): \(error)")
                        }
                    }
                    tallies.withLock { [tally] in $0[thread] = tally }
                }
            }
            let finished = done.wait(timeout: .now() + 60) == .success
            #expect(finished, "the threads did not finish within 60 s")
            sampling.store(false, ordering: .relaxed)
            #expect(sampled.wait(timeout: .now() + 10) == .success)
            guard finished else { return }
            #expect(doubleOpens.all.isEmpty, "a store's lock file was open twice: \(Set(doubleOpens.all))")
            let all = tallies.withLock { $0 }
            #expect(all.flatMap(\.failures).isEmpty, "\(all.flatMap(\.failures))")
            #expect(reports.value == all.map(\.oversizedSets).reduce(0, +))

            setter.kill()
            holder.kill()
            releasedByHandler.withLock { $0 = [nil, nil, nil] }
            for index in 0..<3 {
                let store = try PersistentDefaults(path: paths[index], options: options(index))
                for thread in 0..<threads {
                    let own = PersistentDefaults.Key<Int>("t\(thread)", default: 0)
                    #expect(try store.value(for: own) == all[thread].ownValues[index], "store \(index), t\(thread)")
                }
                #expect(try store.value(for: shared) == all.map { $0.sharedIncrements[index] }.reduce(0, +))
                #expect(try store.verify().isEmpty)
            }
            do {  // Every set the other process acknowledged is there.
                let store = try PersistentDefaults(path: paths[0], options: options(0))
                for line in setter.lines where line.hasPrefix("ack ") {
                    let fields = line.split(separator: " ")
                    guard fields.count == 3, let value = Int(fields[2]) else { continue }
                    let key = PersistentDefaults.Key<Int>("k\(fields[1])", default: 0)
                    #expect(try store.value(for: key) >= value, "\(line)")
                }
            }
            // Closed stores keep no descriptor and no mapping (a watcher thread may hold its
            // store's last pieces until its current check ends).
            let cleared = eventually(timeout: 10) {
                let left = Self.openFiles(under: base)
                return left.descriptors.isEmpty && left.mappings.isEmpty
            }
            #expect(cleared, "\(Self.openFiles(under: base))")
        }
    }
}

extension PersistentDefaultsError {
    /// Whether this is ``decodingFailed(key:type:reason:)``.
    fileprivate var isDecodingFailure: Bool {
        if case .decodingFailed = self { true } else { false }
    }
}

/// A value whose instance made with `onRelease` runs it when it is freed: user code that the
/// library runs when it lets go of a key's default. Decoded instances run nothing.
private final class Marker: Codable, Sendable {
    let number: Int
    private let onRelease: (@Sendable () -> Void)?

    init(number: Int, onRelease: (@Sendable () -> Void)? = nil) {
        self.number = number
        self.onRelease = onRelease
    }

    private enum CodingKeys: CodingKey { case number }

    init(from decoder: any Decoder) throws {
        number = try decoder.container(keyedBy: CodingKeys.self).decode(Int.self, forKey: .number)
        onRelease = nil
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(number, forKey: .number)
    }

    deinit { onRelease?() }
}
