import Foundation
import PDTestSupport
import PersistentDefaults
import Synchronization
import Testing

/// A store in a fresh temporary directory, with an error handler that records what it is told.
func withTemporaryStore<R>(
    options: PersistentDefaults.Options = .init(), _ body: (PersistentDefaults, String, ErrorLog) throws -> R
) throws -> R {
    try withTemporaryDirectory { path throws in
        let (store, log) = try loggingStore(at: path, options: options)
        return try body(store, path, log)
    }
}

/// `withTemporaryStore` for async bodies.
func withTemporaryStoreAsync<R>(
    options: PersistentDefaults.Options = .init(), _ body: (PersistentDefaults, String, ErrorLog) async throws -> R
) async throws -> R {
    try await withTemporaryDirectoryAsync { path in
        let (store, log) = try loggingStore(at: path, options: options)
        return try await body(store, path, log)
    }
}

/// A store at `path` whose error handler records what it is told.
private func loggingStore(
    at path: String, options: PersistentDefaults.Options
) throws -> (PersistentDefaults, ErrorLog) {
    let log = ErrorLog()
    var options = options
    options.errorHandler = { error in log.append(error) }
    return (try PersistentDefaults(path: path, options: options), log)
}

/// A store at `path` with bounded durability (a long interval): for tests that commit many times
/// and are about order and delivery, not about disk syncs.
func boundedStore(at path: String) throws -> PersistentDefaults {
    var options = PersistentDefaults.Options()
    options.durability = .bounded(interval: .seconds(10))
    return try PersistentDefaults(path: path, options: options)
}

/// Errors passed to a store's error handler.
final class ErrorLog: Sendable {
    private let errors = Guarded<[PersistentDefaultsError]>([])
    func append(_ error: PersistentDefaultsError) { errors.withLock { $0.append(error) } }
    var all: [PersistentDefaultsError] { errors.withLock { $0 } }
}

/// The SHA of a file's bytes, to show that a failed operation changed nothing.
func fileBytes(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

/// A thread-safe counter.
final class Counter: Sendable {
    private let count = Atomic<Int>(0)
    func increment() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}

/// Values recorded from callbacks, with a wait for a count that gives up after a timeout.
final class Events<Value: Sendable>: Sendable {
    private let values = Guarded<[Value]>([])
    private let signal = DispatchSemaphore(value: 0)

    func append(_ value: Value) {
        values.withLock { $0.append(value) }
        signal.signal()
    }

    var all: [Value] { values.withLock { $0 } }

    /// Waits until at least `count` values arrived; false after `timeout` seconds without.
    @discardableResult
    func wait(forCount count: Int, timeout: Double = 10) -> Bool {
        let deadline = DispatchTime.now() + timeout
        while values.withLock({ $0.count }) < count {
            if signal.wait(timeout: deadline) == .timedOut { return values.withLock { $0.count } >= count }
        }
        return true
    }
}

/// Whether `condition` holds within `timeout` seconds, checked every millisecond: for state that
/// another process or thread changes and announces nowhere else (a file, a released object).
func eventually(timeout: Double = 10, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while !condition() {
        if Date() > deadline { return false }
        usleep(1_000)
    }
    return true
}

/// Another process writes 4 MiB into the store at `path` (key "blob"), so that its map grows
/// past a 1 MiB one: this process must adopt the larger map before its next read.
func growTheMapFromAnotherProcess(_ path: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let result = try runFixture(["set-bytes", path, "blob", "\(4 << 20)"])
    #expect(result.status == 0, "\(result.output)", sourceLocation: sourceLocation)
}

/// Another process sets the Int key `name` of the store at `path` to `value`.
func setFromAnotherProcess(
    _ path: String, _ name: String, _ value: Int, sourceLocation: SourceLocation = #_sourceLocation
) throws {
    let result = try runFixture(["set-int", path, name, "\(value)"])
    #expect(result.status == 0, "\(result.output)", sourceLocation: sourceLocation)
}

/// Runs `body` on a thread of its own; false when it has not returned after `timeout` seconds
/// (a deadlock: the thread is left behind and the test fails instead of hanging).
func returns(within timeout: Double = 10, _ body: @escaping @Sendable () -> Void) -> Bool {
    let done = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        body()
        done.signal()
    }
    return done.wait(timeout: .now() + timeout) == .success
}

/// Directories under `base` that an open refuses for what they hold: `foreign`, an LMDB
/// environment of another program; `newer`, a store of format version 2 (without its `notify`
/// file, so that a refused open that made one shows); `empty`, an empty LMDB environment.
func refusedStoreDirectories(in base: String) throws -> (foreign: String, newer: String, empty: String) {
    let foreign = base + "/foreign"
    try FileManager.default.createDirectory(atPath: foreign, withIntermediateDirectories: true)
    try rawLMDBPut(foreign, [RawLMDBEntry(database: "other", key: Array("k".utf8), value: [1])])
    let newer = base + "/newer"
    do { _ = try PersistentDefaults(path: newer) }
    try FileManager.default.removeItem(atPath: newer + "/notify")
    try rawLMDBPut(newer, [RawLMDBEntry(database: "meta", key: Array("format-version".utf8), value: [0, 0, 0, 2])])
    let empty = base + "/empty"
    try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
    try rawLMDBPut(empty, [])
    return (foreign, newer, empty)
}

/// Runs `body` on `count` new POSIX threads and joins them: `pthread_join` returns only after a
/// thread's `pthread_key` destructors ran (which retire its reader slots), so a test can check
/// what thread exit released.
func onJoinedThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    final class Work: @unchecked Sendable {
        // @unchecked Sendable: immutable after init.
        let body: @Sendable (Int) -> Void
        let index: Int
        init(_ body: @escaping @Sendable (Int) -> Void, _ index: Int) {
            self.body = body
            self.index = index
        }
    }
    var threads: [pthread_t] = []
    for index in 0..<count {
        var thread = pthread_t()
        let work = Unmanaged.passRetained(Work(body, index)).toOpaque()
        let created = pthread_create(
            &thread, nil,
            { pointer in
                guard let pointer else { return nil }
                let work = Unmanaged<Work>.fromOpaque(pointer).takeRetainedValue()
                work.body(work.index)
                return nil
            }, work)
        #expect(created == 0)
        threads.append(thread)
    }
    for thread in threads { pthread_join(thread, nil) }
}
