import Foundation

/// A path under the system temporary directory that nothing uses yet: `PREFIX-UUID`, not
/// created (a store creates its own directory).
public func temporaryPath(_ prefix: String) -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)").path
}

/// Runs `body` with a fresh temporary path (see `temporaryPath`) and removes whatever is there
/// when `body` ends, also when it throws.
public func withTemporaryDirectory<R>(_ prefix: String = "pd-test", _ body: (String) throws -> R) throws -> R {
    let path = temporaryPath(prefix)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try body(path)
}

/// `withTemporaryDirectory` for async bodies.
public func withTemporaryDirectoryAsync<R>(
    _ prefix: String = "pd-test", _ body: (String) async throws -> R
) async throws -> R {
    let path = temporaryPath(prefix)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try await body(path)
}
