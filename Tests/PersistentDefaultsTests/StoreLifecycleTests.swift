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
}
