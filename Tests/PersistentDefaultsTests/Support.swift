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

/// A store at `path` with bounded durability (a long interval): for tests that commit many times
/// and are about order and delivery, not about disk syncs.
func boundedStore(at path: String) throws -> PersistentDefaults {
    var options = PersistentDefaults.Options()
    options.durability = .bounded(interval: .seconds(10))
    return try PersistentDefaults(path: path, options: options)
}

/// A value guarded by an `NSLock`: unlike `Synchronization.Mutex`, visible to ThreadSanitizer,
/// so that a TSan run of the tests reports only real races.
final class Guarded<Value: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `value` is touched only between `lock()` and `unlock()`.
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// Errors passed to a store's error handler.
final class ErrorLog: Sendable {
    private let errors = Guarded<[PersistentDefaultsError]>([])
    func append(_ error: PersistentDefaultsError) { errors.withLock { $0.append(error) } }
    var all: [PersistentDefaultsError] { errors.withLock { $0 } }
}

/// How a child process ended and what it wrote (standard output and error together).
struct ProcessResult {
    var status: Int32
    var exitedNormally: Bool
    var output: String
}

/// Runs `executable` to its end, in `directory` when given, with `environment` added.
@discardableResult
func runProcess(
    _ executable: URL, _ arguments: [String], environment: [String: String] = [:], directory: String? = nil
) throws -> ProcessResult {
    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let output = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return ProcessResult(
        status: process.terminationStatus, exitedNormally: process.terminationReason == .exit,
        output: String(decoding: output, as: UTF8.self))
}

/// Runs an executable built next to the test bundle; returns exit status and its output.
@discardableResult
func runProduct(
    _ name: String, _ arguments: [String], environment: [String: String] = [:]
) throws -> (status: Int32, stderr: String) {
    let result = try runProcess(productsDirectory.appendingPathComponent(name), arguments, environment: environment)
    return (result.status, result.output)
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

/// A child process whose standard output is collected as it arrives, so that a test can wait
/// for a line with a timeout instead of sleeping.
final class Child: Sendable {
    let process: Process
    private let output = Guarded(Data())
    private let arrived = DispatchSemaphore(value: 0)
    private let exited = DispatchSemaphore(value: 0)
    /// Whether standard output reached its end (every byte is in `output`).
    private let closed = Guarded(false)

    /// Starts `executable` (default: pd-worker) with `arguments`.
    init(_ arguments: [String], environment: [String: String] = [:], executable: URL? = nil) throws {
        process = Process()
        process.executableURL = executable ?? productsDirectory.appendingPathComponent("pd-worker")
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.terminationHandler = { [exited] _ in exited.signal() }
        pipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil }
            self?.output.withLock { $0.append(data) }
            if data.isEmpty { self?.closed.withLock { $0 = true } }
            self?.arrived.signal()
        }
        try process.run()
    }

    var text: String { output.withLock { String(decoding: $0, as: UTF8.self) } }

    /// Waits until the output contains `needle`; false after `timeout` seconds without.
    func wait(for needle: String, timeout: Double = 20) -> Bool {
        let deadline = DispatchTime.now() + timeout
        while !text.contains(needle) {
            // At the end of the output (the process ended), nothing more can arrive. Checked
            // instead of whether the process runs: it may end before its last bytes are read.
            if closed.withLock({ $0 }) { return text.contains(needle) }
            if arrived.wait(timeout: deadline) == .timedOut { return text.contains(needle) }
        }
        return true
    }

    /// The complete lines written so far.
    var lines: [String] { text.split(separator: "\n").map(String.init) }

    /// Waits for the process to end; false after `timeout` seconds (the process is then killed).
    func waitForExit(timeout: Double = 60) -> Bool {
        guard exited.wait(timeout: .now() + timeout) == .success else {
            kill()
            return false
        }
        process.waitUntilExit()
        return true
    }

    func kill() {
        _ = Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}
