import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// A fresh store in its own temporary directory, removed when the fixture goes away.
final class TemporaryStore {
    let directory: String
    let path: String

    /// Creates the store with the library and fills it with one value of several types.
    init(seeded: Bool = true) throws {
        directory = temporaryPath("pdinspect")
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
struct RunningTool {
    let child: ChildProcess

    /// Starts `pdinspect arguments` with `stdin` as its input; as user `nobody` (through
    /// `setpriv`) when `asNobody`.
    init(_ arguments: [String], stdin: String? = nil, asNobody: Bool = false) throws {
        let nobody = ["--reuid=65534", "--regid=65534", "--clear-groups", Products.pdinspect.path]
        child = try ChildProcess(
            asNobody ? URL(fileURLWithPath: "/usr/bin/setpriv") : Products.pdinspect,
            asNobody ? nobody + arguments : arguments, input: .text(stdin ?? ""), errors: .separate)
    }

    /// Waits until standard error contains `text`; false at its end.
    func waitForError(containing text: String) -> Bool { child.waitForError(containing: text) }

    /// Sends SIGTERM.
    func terminate() { child.terminate() }

    /// Waits until the process exits; a process still running after `timeout` seconds is
    /// killed and the test fails. A signal's status is 128 + its number, as a shell shows it.
    func finish(timeout: Double = 30) -> Outcome {
        if !child.waitForExit(timeout: timeout) {
            Issue.record("pdinspect \(child.process.arguments ?? []) did not exit within \(timeout) s")
        }
        #expect(child.waitForOutputEnd(), "pdinspect's output stayed open after it ended")
        let process = child.process
        let status =
            process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
        return Outcome(status: status, stdout: child.text, stderr: child.errorText)
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

/// Whether this process can run a command as user `nobody` (root with `setpriv`).
let canRunAsNobody: Bool = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")

/// Text written to a `Console`, collected under a lock.
final class CollectedLines: @unchecked Sendable {
    // @unchecked Sendable: `lines` is touched only while `lock` is held.
    private let lock = NSLock()
    private var lines: [String] = []
    func append(_ line: String) { lock.withLock { lines.append(line) } }
    var all: [String] { lock.withLock { lines } }
}
