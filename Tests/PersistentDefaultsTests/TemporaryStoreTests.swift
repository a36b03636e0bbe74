import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// `PersistentDefaults.temporary()`: a throwaway store in a fresh private directory.
@Suite struct TemporaryStoreTests {
    static func mode(_ path: String) throws -> Int {
        try #require(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber).intValue
    }

    @Test func aTemporaryStoreIsPrivateAndGoneWhenItsLastHandleCloses() throws {
        var path = ""
        do {
            let store = try PersistentDefaults.temporary()
            path = store.path
            #expect(store.isTemporary)
            #expect(path.hasPrefix(FileManager.default.temporaryDirectory.resolvingSymlinksInPath().path))
            #expect((path as NSString).lastPathComponent.hasPrefix("PersistentDefaults-temporary-"))
            #expect(try Self.mode(path) == 0o700)
            #expect(try Self.mode(path + "/data.mdb") == 0o600)
            store[.launchCount] = 3
            #expect(store[.launchCount] == 3)
            do {
                // A second handle on the path shares the store and keeps it alive.
                let second = try PersistentDefaults(path: path)
                #expect(second[.launchCount] == 3)
                #expect(second.isTemporary)
            }
            #expect(FileManager.default.fileExists(atPath: path + "/data.mdb"))
            #expect(store[.launchCount] == 3)
        }
        #expect(!path.isEmpty)
        #expect(!FileManager.default.fileExists(atPath: path), "removed with the last handle")
    }

    @Test func everyTemporaryStoreIsNewAndEmpty() throws {
        let first = try PersistentDefaults.temporary()
        let second = try PersistentDefaults.temporary()
        #expect(first.path != second.path)
        first[.launchCount] = 1
        #expect(second[.launchCount] == 0)
        #expect(try second.keyNames().isEmpty)
        #expect(try PersistentDefaults(path: NSTemporaryDirectory() + "/pd-test-\(UUID())").isTemporary == false)
    }

    @Test func optionsApplyAndReadOnlyIsRefused() throws {
        var options = PersistentDefaults.Options()
        options.durability = .bounded(interval: .milliseconds(50))
        options.maxValueSize = 16
        let store = try PersistentDefaults.temporary(options: options)
        #expect(store.options.durability == .bounded(interval: .milliseconds(50)))
        #expect(throws: PersistentDefaultsError.self) {
            try store.set(String(repeating: "x", count: 20), for: PersistentDefaults.Key<String>("s", default: ""))
        }
        options.readOnly = true
        #expect {
            try PersistentDefaults.temporary(options: options)
        } throws: { error in
            guard case PersistentDefaultsError.optionsConflict(_, let reason) = error else { return false }
            return reason.contains("read-only")
        }
    }

    /// The store that stands in for a standard store that cannot open (its path is a file here)
    /// was left in the temporary directory at exit, one more directory per run.
    @Test func theStandardStoresStandInIsRemovedAtANormalExit() throws {
        try withTemporaryDirectory { file throws in
            let result = try runFixture(["standard-handler-reads-standard", file])
            #expect(result.status == 0, "\(result.output)")
            let line = result.output.split(separator: "\n").first { $0.hasPrefix("stand-in /") }
            let path = try #require(line.map { String($0.dropFirst("stand-in ".count)) }, "\(result.output)")
            defer { try? FileManager.default.removeItem(atPath: path) }
            #expect(path.contains("/PersistentDefaults-standard-"), "\(path)")
            #expect(!FileManager.default.fileExists(atPath: path), "removed by the exit handler")
        }
    }

    @Test func theStandardStorePointedAtATemporaryOneIsRemovedAtANormalExit() throws {
        // pd-fixture makes a temporary store the standard one (the recipe in GettingStarted.md), writes
        // through `standard`, prints the path and exits without releasing it.
        let result = try runFixture(["temporary-standard"])
        #expect(result.status == 0, "\(result.output)")
        let path = try #require(
            result.output.split(separator: "\n").first { $0.hasPrefix("/") }.map(String.init), "\(result.output)")
        #expect(!FileManager.default.fileExists(atPath: path), "removed by the exit handler")
    }
}
