import Dispatch
import Foundation
import PersistentDefaults
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A fresh store in its own temporary directory, removed when the fixture goes away.
final class TemporaryStore {
    let directory: String
    let path: String

    /// Creates the store with the library and fills it with one value of several types.
    init(seeded: Bool = true) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("pdinspect-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        path = directory + "/store"
        let store = try PersistentDefaults(path: path)
        guard seeded else { return }
        try store.set(3, for: PersistentDefaults.Key<Int>("launchCount", default: 0))
        try store.write { tx in
            try tx.setStoredValue(.string("dark"), named: "theme")
            try tx.setStoredValue(.double(0.75), named: "ratio")
            try tx.setStoredValue(.bool(true), named: "window.visible")
            try tx.setStoredValue(.json(#"{"title":"Main","x":10}"#), named: "window.frame")
            try tx.setStoredValue(.data(Data([0x0a, 0x1b])), named: "blob")
            try tx.setStoredValue(.date(Date(timeIntervalSince1970: 1_800_000_000)), named: "when")
        }
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    /// Opens the store in this process (shared with any other handle of this process).
    func open() throws -> PersistentDefaults { try PersistentDefaults(path: path) }

    /// The bytes of `data.mdb`, to show that a command left them unchanged.
    var dataBytes: Data { FileManager.default.contents(atPath: path + "/data.mdb") ?? Data() }

    /// A path inside the fixture's directory that nothing uses yet.
    func scratch(_ name: String) -> String { directory + "/" + name }
}

/// What a finished `pdinspect` process left.
struct Outcome: CustomStringConvertible {
    var status: Int32
    var stdout: String
    var stderr: String

    var description: String { "exit \(status)\nstdout: \(stdout)\nstderr: \(stderr)" }

    /// Standard error is exactly one line from pdinspect.
    var isOneErrorLine: Bool {
        stderr.hasPrefix("pdinspect: ") && stderr.hasSuffix("\n") && stderr.dropLast().contains("\n") == false
    }

    /// Standard output parsed as one JSON document.
    func json() throws -> Any { try JSONSerialization.jsonObject(with: Data(stdout.utf8), options: .fragmentsAllowed) }

    /// Standard output parsed as one JSON object per line.
    func jsonLines() throws -> [[String: Any]] {
        try stdout.split(separator: "\n").map {
            try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
        }
    }
}

/// A running `pdinspect`; `finish` waits for it with a deadline and kills it past the deadline.
final class RunningTool: @unchecked Sendable {
    // @unchecked Sendable: `process` is only touched by the test's thread; the termination
    // handler only signals the semaphore.
    private let process = Process()
    private let exited = DispatchSemaphore(value: 0)
    private let stdoutPath: String
    private let stderrPath: String

    /// The built `pdinspect`, found next to the test bundle.
    static let binary: String = {
        var directory = URL(
            fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
                ?? CommandLine.arguments[0]
        ).deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = directory.appendingPathComponent("pdinspect").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            directory.deleteLastPathComponent()
        }
        return "pdinspect-not-found-next-to-the-test-bundle"
    }()

    private var errorPipe: Pipe?
    private var errorSeen = Data()

    init(_ arguments: [String], stdin: String? = nil, asNobody: Bool = false, errorPipe: Bool = false) throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("pdinspect-out-\(UUID().uuidString)")
            .path
        stdoutPath = base + ".out"
        stderrPath = base + ".err"
        _ = FileManager.default.createFile(atPath: stdoutPath, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        if asNobody {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = ["--reuid=65534", "--regid=65534", "--clear-groups", Self.binary] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: Self.binary)
            process.arguments = arguments
        }
        process.standardOutput = FileHandle(forWritingAtPath: stdoutPath)
        if errorPipe {
            let pipe = Pipe()
            self.errorPipe = pipe
            process.standardError = pipe
        } else {
            process.standardError = FileHandle(forWritingAtPath: stderrPath)
        }
        let input = Pipe()
        process.standardInput = input
        process.terminationHandler = { [exited] _ in exited.signal() }
        try process.run()
        input.fileHandleForWriting.write(Data((stdin ?? "").utf8))
        try input.fileHandleForWriting.close()
    }

    /// Reads standard error (with `errorPipe`) until it contains `text`; false at its end.
    func waitForError(containing text: String) -> Bool {
        guard let errorPipe else { return false }
        while !String(decoding: errorSeen, as: UTF8.self).contains(text) {
            let chunk = errorPipe.fileHandleForReading.availableData
            guard !chunk.isEmpty else { return false }
            errorSeen.append(chunk)
        }
        return true
    }

    /// Sends SIGTERM.
    func terminate() { process.terminate() }

    /// Waits until the process exits; a process still running after `timeout` seconds is
    /// killed and the test fails.
    func finish(timeout: Double = 30) -> Outcome {
        if exited.wait(timeout: .now() + timeout) == .timedOut {
            Issue.record("pdinspect \(process.arguments ?? []) did not exit within \(timeout) s")
            process.terminate()
            exited.wait()
        }
        defer {
            try? FileManager.default.removeItem(atPath: stdoutPath)
            try? FileManager.default.removeItem(atPath: stderrPath)
        }
        func text(_ path: String) -> String {
            String(decoding: FileManager.default.contents(atPath: path) ?? Data(), as: UTF8.self)
        }
        if let errorPipe { errorSeen.append(errorPipe.fileHandleForReading.readDataToEndOfFile()) }
        let stderr = errorPipe == nil ? text(stderrPath) : String(decoding: errorSeen, as: UTF8.self)
        let status =
            process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
        return Outcome(status: status, stdout: text(stdoutPath), stderr: stderr)
    }
}

/// Runs `pdinspect` with `arguments` to the end.
func pdinspect(_ arguments: String..., stdin: String? = nil, asNobody: Bool = false) throws -> Outcome {
    try RunningTool(arguments, stdin: stdin, asNobody: asNobody).finish()
}

/// Runs `pdinspect` with an argument array to the end.
func pdinspect(arguments: [String], stdin: String? = nil) throws -> Outcome {
    try RunningTool(arguments, stdin: stdin).finish()
}

/// Whether `python3` can import the `lmdb` package.
let pythonHasLMDB: Bool = {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", "-c", "import lmdb"]
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    guard (try? process.run()) != nil else { return false }
    process.waitUntilExit()
    return process.terminationStatus == 0
}()

/// Runs a Python script with `arguments`; returns its exit status.
func python(_ script: String, _ arguments: [String]) throws -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", "-c", script] + arguments
    try process.run()
    process.waitUntilExit()
    return process.terminationStatus
}

/// Whether this process can run a command as user `nobody` (root with `setpriv`).
let canRunAsNobody: Bool = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")
