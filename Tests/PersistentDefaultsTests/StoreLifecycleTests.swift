import Foundation
import PDTestSupport
import PersistentDefaults
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

    /// A writable open needs no reader slot: LMDB's write transaction takes none. While other
    /// processes' reads held every slot of the reader table, the open (which reads first)
    /// failed with readersFull, though this process could write.
    @Test func aWritableOpenSucceedsWhileOtherProcessesHoldEveryReaderSlot() throws {
        try withTemporaryDirectory { path throws in
            var options = PersistentDefaults.Options()
            options.maxReaders = 2
            let key = PersistentDefaults.Key<Int>("k", default: 0)
            try PersistentDefaults(path: path, options: options).set(7, for: key)  // Closed at once.
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
