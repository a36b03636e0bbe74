import Foundation
import PersistentDefaults
import Synchronization
import Testing

/// A fresh directory under the system temporary directory, removed when the test ends.
func withTemporaryDirectory<R>(_ body: (String) throws -> R) throws -> R {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("pd-test-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try body(path)
}

/// `withTemporaryDirectory` for async bodies.
func withTemporaryDirectoryAsync<R>(_ body: (String) async throws -> R) async throws -> R {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("pd-test-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try await body(path)
}

/// A store in a fresh temporary directory, with an error handler that records what it is told.
func withTemporaryStore<R>(
    options: PersistentDefaults.Options = .init(), _ body: (PersistentDefaults, String, ErrorLog) throws -> R
) throws -> R {
    try withTemporaryDirectory { path throws in
        let log = ErrorLog()
        var options = options
        options.errorHandler = { error in log.append(error) }
        let store = try PersistentDefaults(path: path, options: options)
        return try body(store, path, log)
    }
}

/// Errors passed to a store's error handler.
final class ErrorLog: Sendable {
    private let errors = Mutex<[PersistentDefaultsError]>([])
    func append(_ error: PersistentDefaultsError) { errors.withLock { $0.append(error) } }
    var all: [PersistentDefaultsError] { errors.withLock { $0 } }
}

/// Runs an executable built next to the test bundle; returns exit status and standard error.
@discardableResult
func runProduct(
    _ name: String, _ arguments: [String], environment: [String: String] = [:]
) throws -> (status: Int32, stderr: String) {
    let process = Process()
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    process.executableURL = productsDirectory.appendingPathComponent(name)
    process.arguments = arguments
    let errorPipe = Pipe()
    process.standardError = errorPipe
    try process.run()
    let stderr = errorPipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: stderr, as: UTF8.self))
}

/// The build products directory: where the test bundle and the executables are.
let productsDirectory: URL = {
    let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    var directory = executable.deletingLastPathComponent()
    // On Linux the tests run from `<products>/<Package>PackageTests.xctest`.
    while !FileManager.default.fileExists(atPath: directory.appendingPathComponent("pd-worker").path),
        directory.path != "/"
    {
        directory = directory.deletingLastPathComponent()
    }
    return directory
}()

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
    private let values = Mutex<[Value]>([])
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
