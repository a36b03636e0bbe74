import Foundation

/// The one way the tests, the fixture's drivers and pdbench run another process: its output is
/// collected as it arrives (on threads of its own, so a full pipe never stalls the child), so a
/// caller can wait for a line with a timeout instead of sleeping, and read everything once the
/// process ended.
///
/// ```swift
/// let child = try ChildProcess(Products.fixture, ["watch", path, "1", "counter"])
/// #expect(child.wait(for: "ready"))
/// // … commit from this process …
/// #expect(child.waitForExit(timeout: 20))
/// ```
public final class ChildProcess: Sendable {
    /// What the child reads on standard input.
    public enum Input: Sendable {
        /// `/dev/null`.
        case none
        /// This text, then end of file.
        case text(String)
        /// A pipe left open until `closeInput()` (a child that runs until its input ends).
        case open
    }

    /// Where the child's standard error goes.
    public enum Errors: Sendable {
        /// To this process's standard error (it shows in the test log).
        case inherited
        /// Into `text`, with standard output, in the order written.
        case merged
        /// Collected apart, in `errorText`.
        case separate
    }

    /// The running process (its `processIdentifier`, `terminationStatus` and `terminationReason`).
    public let process: Process
    private let output: CollectedStream
    private let errors: CollectedStream?
    private let input: FileHandle?
    private let exited = DispatchSemaphore(value: 0)

    /// Starts `executable` with `arguments`; `environment` is added to this process's, and
    /// `directory` (when given) is the child's working directory.
    ///
    /// Swift's crash backtracer is off in the child unless `environment` sets `SWIFT_BACKTRACE`:
    /// the backtracer is a grandchild that inherits the child's pipes and the descriptor through
    /// which Foundation learns that the child ended, so while it runs, or when it stalls (seen
    /// under ThreadSanitizer: blocked for over ten minutes after the crashed child was gone),
    /// neither the end of the output nor the exit arrives. A crash shows as its signal.
    public init(
        _ executable: URL, _ arguments: [String], environment: [String: String] = [:], directory: String? = nil,
        input: Input = .none, errors: Errors = .inherited
    ) throws {
        process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(
            ["SWIFT_BACKTRACE": "enable=no"].merging(environment) { $1 }
        ) { $1 }
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let outputPipe = Pipe()
        process.standardOutput = outputPipe
        var errorPipe: Pipe?
        switch errors {
        case .inherited: break
        case .merged: process.standardError = outputPipe
        case .separate:
            errorPipe = Pipe()
            process.standardError = errorPipe
        }
        var inputPipe: Pipe?
        switch input {
        case .none: process.standardInput = FileHandle.nullDevice
        case .text, .open:
            inputPipe = Pipe()
            process.standardInput = inputPipe
        }
        self.input = inputPipe?.fileHandleForWriting
        process.terminationHandler = { [exited] _ in exited.signal() }
        try process.run()
        output = CollectedStream(outputPipe.fileHandleForReading)
        self.errors = errorPipe.map { CollectedStream($0.fileHandleForReading) }
        if case .text(let text) = input {
            inputPipe?.fileHandleForWriting.write(Data(text.utf8))
            closeInput()
        }
    }

    /// Starts the test fixture `pd-fixture` with `arguments` (its modes are listed in its main.swift).
    public convenience init(fixture arguments: [String], environment: [String: String] = [:]) throws {
        try self.init(Products.fixture, arguments, environment: environment)
    }

    /// Standard output so far (with standard error when `.merged`).
    public var text: String { output.text }

    /// Standard error so far, when collected `.separate`ly; else empty.
    public var errorText: String { errors?.text ?? "" }

    /// The complete lines of standard output written so far.
    public var lines: [String] { text.split(separator: "\n").map(String.init) }

    /// Waits until standard output contains `needle`; false after `timeout` seconds without, or
    /// when the output ended without it.
    public func wait(for needle: String, timeout: Double = 20) -> Bool {
        output.wait(timeout: timeout) { $0.contains(needle) }
    }

    /// Waits until standard error (collected `.separate`ly) contains `needle`; false after
    /// `timeout` seconds without, or when it ended without it.
    public func waitForError(containing needle: String, timeout: Double = 20) -> Bool {
        errors?.wait(timeout: timeout) { $0.contains(needle) } ?? false
    }

    /// Waits for a complete line of standard output that starts with `prefix` and returns it;
    /// nil after `timeout` seconds without, or when the output ended without it.
    public func line(startingWith prefix: String, timeout: Double = 60) -> String? {
        func find(_ text: String) -> String? {
            text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
                .first { $0.hasPrefix(prefix) }.map(String.init)
        }
        return output.wait(timeout: timeout) { find($0) != nil } ? find(text) : nil
    }

    /// Waits for the process to end; false after `timeout` seconds (the process is then killed).
    public func waitForExit(timeout: Double = 60) -> Bool {
        guard exited.wait(timeout: .now() + timeout) == .success else {
            kill()
            return false
        }
        exited.signal()  // So that a later wait returns at once.
        process.waitUntilExit()
        return true
    }

    /// Waits until standard output and standard error reached their end (at once when the
    /// process ended, unless a grandchild holds them open); false after `timeout` seconds.
    public func waitForOutputEnd(timeout: Double = 10) -> Bool {
        output.waitForEnd(timeout: timeout) && errors?.waitForEnd(timeout: timeout) != false
    }

    /// Closes standard input (`.text` and `.open`), so the child reads its end.
    public func closeInput() { try? input?.close() }

    /// Sends SIGTERM.
    public func terminate() { process.terminate() }

    /// Kills the process with SIGKILL and waits, at most `timeout` seconds, until its end is seen
    /// (a grandchild holding its descriptors can delay that); whether it was.
    @discardableResult
    public func kill(timeout: Double = 30) -> Bool {
        _ = Foundation.kill(process.processIdentifier, SIGKILL)
        guard exited.wait(timeout: .now() + timeout) == .success else { return false }
        exited.signal()
        process.waitUntilExit()
        return true
    }

    /// How a finished process ended, with everything it wrote to standard output.
    public var result: ProcessResult {
        // Killed, but its end not seen (see `kill(timeout:)`): reported as killed.
        guard !process.isRunning else { return ProcessResult(status: SIGKILL, exitedNormally: false, output: text) }
        return ProcessResult(
            status: process.terminationStatus, exitedNormally: process.terminationReason == .exit, output: text)
    }
}

/// How a child process ended and what it wrote.
public struct ProcessResult: Sendable {
    /// The exit status, or the signal number when `exitedNormally` is false.
    public var status: Int32
    /// Whether the process called `exit` (else a signal ended it).
    public var exitedNormally: Bool
    /// Standard output (and standard error when it was merged).
    public var output: String
}

/// Runs `executable` to its end (killed after `timeout` seconds), standard error merged into
/// the output, in `directory` when given, with `environment` added.
@discardableResult
public func runProcess(
    _ executable: URL, _ arguments: [String], environment: [String: String] = [:], directory: String? = nil,
    timeout: Double = 600
) throws -> ProcessResult {
    let child = try ChildProcess(
        executable, arguments, environment: environment, directory: directory, errors: .merged)
    _ = child.waitForExit(timeout: timeout)
    _ = child.waitForOutputEnd()
    return child.result
}

/// Runs the test fixture `pd-fixture` to its end; its result.
@discardableResult
public func runFixture(_ arguments: [String], environment: [String: String] = [:]) throws -> ProcessResult {
    try runProcess(Products.fixture, arguments, environment: environment)
}

/// One output stream of a child, read to its end on a thread of its own.
private final class CollectedStream: Sendable {
    private let state = Guarded((data: Data(), closed: false))
    private let arrived = DispatchSemaphore(value: 0)

    init(_ handle: FileHandle) {
        Thread.detachNewThread { [self] in
            while true {
                let chunk = handle.availableData
                state.withLock {
                    $0.data.append(chunk)
                    if chunk.isEmpty { $0.closed = true }
                }
                arrived.signal()
                if chunk.isEmpty { return }
            }
        }
    }

    var text: String { state.withLock { String(decoding: $0.data, as: UTF8.self) } }
    var isClosed: Bool { state.withLock { $0.closed } }

    /// Waits until `condition` holds for the text, or the stream ended; whether it holds.
    func wait(timeout: Double, until condition: (String) -> Bool) -> Bool {
        let deadline = DispatchTime.now() + timeout
        while true {
            let (text, closed) = state.withLock { (String(decoding: $0.data, as: UTF8.self), $0.closed) }
            if condition(text) { return true }
            if closed || arrived.wait(timeout: deadline) == .timedOut { return condition(self.text) }
        }
    }

    /// Waits until the stream ended; false after `timeout` seconds.
    func waitForEnd(timeout: Double) -> Bool {
        _ = wait(timeout: timeout) { _ in false }
        return isClosed
    }
}
