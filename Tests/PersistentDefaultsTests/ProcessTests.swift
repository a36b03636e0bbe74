import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

@Suite struct ProcessTests {
    @Test func twoProcessesIncrementingThroughWriteLoseNoUpdate() async throws {
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            let counter = PersistentDefaults.Key<Int>("counter", default: 0)
            async let first = Task.detached { try runFixture(["increment", path, "counter", "200"]) }.value
            async let second = Task.detached { try runFixture(["increment", path, "counter", "200"]) }
                .value
            // This process increments at the same time.
            for _ in 0..<100 { try store.write { $0[counter] += 1 } }
            let results = try await [first, second]
            #expect(results.map(\.status) == [0, 0], "\(results.map(\.output))")
            #expect(store[counter] == 500)
            #expect(try store.lastSequence() == 500)
            let pids = Set(try store.commits(after: 0).map(\.processID))
            #expect(pids.count == 3)
        }
    }

    @Test func valuesCommittedByAnEndedProcessAreThereOnReopen() throws {
        try withTemporaryDirectory { path throws in
            let result = try runFixture(["set-int", path, "answer", "42"])
            #expect(result.status == 0, "\(result.output)")
            let store = try PersistentDefaults(path: path)
            #expect(store[PersistentDefaults.Key<Int>("answer", default: 0)] == 42)
            #expect(try store.commits(after: 0).first?.processID != getpid())
        }
    }

    @Test func aMapGrownByAnotherProcessIsAdopted() throws {
        try withTemporaryDirectory { path throws in
            let store = try PersistentDefaults(path: path)  // 1 MiB map
            store[.launchCount] = 1
            let mapBefore = try store.statistics().mapSize
            let result = try runFixture(["set-bytes", path, "blob", "\(8 << 20)"])
            #expect(result.status == 0, "\(result.output)")
            let blob = PersistentDefaults.Key<Data>("blob", default: Data())
            #expect(try store.value(for: blob).count == 8 << 20)
            store[.launchCount] = 2
            #expect(store[.launchCount] == 2)
            #expect(try store.statistics().mapSize > mapBefore)
        }
    }

    @Test func workerUsageErrorsExitWithTwo() throws {
        #expect(try runFixture(["frobnicate"]).status == 2)
        try withTemporaryDirectory { path throws in
            #expect(try runFixture(["frobnicate", path, "k", "1"]).status == 2)
        }
    }
}

@Suite struct SizeTests {
    @Test func valuesOfManyMegabytesGrowTheMapByThemselves() throws {
        var options = PersistentDefaults.Options()
        options.initialMapSize = 1 << 20
        try withTemporaryStore(options: options) { store, _, log throws in
            let blob = PersistentDefaults.Key<Data>("blob", default: Data())
            let big = Data((0..<(24 << 20)).map { UInt8(truncatingIfNeeded: $0) })
            try store.set(big, for: blob)
            #expect(try store.value(for: blob) == big)
            // Growth also happens inside a transaction whose size was not known in advance.
            try store.write { tx in
                for index in 0..<40 {
                    tx[PersistentDefaults.Key<Data>("chunk\(index)", default: Data())] = Data(
                        repeating: UInt8(index), count: 256 << 10)
                }
            }
            #expect(store[PersistentDefaults.Key<Data>("chunk39", default: Data())].count == 256 << 10)
            #expect(try store.statistics().mapSize >= 34 << 20)
            #expect(log.all.isEmpty)
            #expect(try store.verify().isEmpty)
        }
    }

    @Test func theBodyOfAWriteRunsAgainOnlyWhenTheMapMustGrow() throws {
        try withTemporaryStore { store, _, _ throws in
            let runs = Counter()
            try store.write { tx in
                runs.increment()
                tx[PersistentDefaults.Key<Data>("big", default: Data())] = Data(repeating: 1, count: 4 << 20)
            }
            #expect(runs.value == 2)
            try store.write { tx in
                runs.increment()
                tx[.launchCount] = 1
            }
            #expect(runs.value == 3)
        }
    }
}

/// Whether strace can trace a child here (it is installed and ptrace is permitted).
let canTrace: Bool = {
    guard FileManager.default.isExecutableFile(atPath: "/usr/bin/strace") else { return false }
    return (try? runProcess(URL(fileURLWithPath: "/usr/bin/strace"), ["-qq", "-e", "trace=none", "/bin/true"]).status)
        == 0
}()

@Suite struct DurabilityTests {
    @Test func boundedModeCommitsAreReadableAndSurviveReopen() throws {
        try withTemporaryDirectory { path throws in
            var options = PersistentDefaults.Options()
            options.durability = .bounded(interval: .milliseconds(50))
            do {
                let store = try PersistentDefaults(path: path, options: options)
                for value in 1...100 { store[.launchCount] = value }
                #expect(store[.launchCount] == 100)
                try store.flush()
            }
            let reopened = try PersistentDefaults(path: path)
            #expect(reopened[.launchCount] == 100)
            #expect(try reopened.lastSequence() == 100)
        }
    }

    /// A `.bounded` store that is never released (here the standard store) must still be synced
    /// when the process exits normally, or a machine crash right after the exit loses more than
    /// the interval. Checked from outside with strace, since syncing is invisible to the process:
    /// the last write to `data.mdb` must be followed by an `fdatasync`/`fsync` of it. (Meta pages
    /// go through the same descriptor in `.bounded` mode: LMDB writes them to `me_fd`, not to the
    /// O_DSYNC `me_mfd`, when MDB_NOSYNC is set.)
    @Test(.enabled(if: canTrace, "needs strace with ptrace permitted (tools/setup installs strace)"))
    func boundedCommitsOfAStoreNeverReleasedAreSyncedAtANormalExit() throws {
        try withTemporaryDirectory { path throws in
            let calls = try dataFileCalls(of: ["bounded-exit", path, "50"], path: path)
            #expect(try syncFollowsTheLastWrite(calls), "the last data.mdb calls: \(calls.suffix(6))")
            let store = try PersistentDefaults(path: path)
            #expect(store[PersistentDefaults.Key<Int>("k", default: 0)] == 50)
        }
    }

    /// A `.bounded` store's creation is synced by the open itself (found by `tools/power-cut`:
    /// a cut before the first interval left empty or half-built files).
    @Test(.enabled(if: canTrace, "needs strace with ptrace permitted (tools/setup installs strace)"))
    func aBoundedStoresCreationIsSyncedByTheOpen() throws {
        try withTemporaryDirectory { path throws in
            let calls = try dataFileCalls(of: ["create-and-vanish", path], path: path)
            #expect(try syncFollowsTheLastWrite(calls), "the last data.mdb calls: \(calls.suffix(6))")
        }
    }

    /// A new store's directory entries are synced before its first commit returns: the store
    /// directory (`data.mdb`, `lock.mdb`, `notify`), and each directory the open made, up to the
    /// first that existed. Syncing `data.mdb` does not make its entry durable (fsync(2)), so a
    /// power cut after an acknowledged `.sync` set could lose the whole store; nothing synced a
    /// directory before. Opening the store again syncs no directory.
    @Test(
        .enabled(if: canTrace, "needs strace with ptrace permitted (tools/setup installs strace)"),
        arguments: ["sync", "bounded"])
    func aNewStoresDirectoryEntriesAreSyncedBeforeItsFirstCommitReturns(durability: String) throws {
        try withTemporaryDirectory { base throws in
            try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: false)
            let path = base + "/new/store"
            let environment = ["PD_DURABILITY": durability]
            let created = try tracedCalls(of: ["set-int", path, "k", "1"], environment: environment)
            let synced = Set(created.compactMap { $0.name == "fsync" ? $0.file : nil })
            #expect(synced.isSuperset(of: [path, base + "/new", base]), "directories synced: \(synced.sorted())")
            // Before the set's commit: every directory sync comes before the last write of data.mdb.
            let lastWrite = created.lastIndex { $0.file == path + "/data.mdb" && $0.name.hasPrefix("pwrite") }
            let lastDirectorySync = created.lastIndex { $0.name == "fsync" && !$0.file.hasSuffix(".mdb") }
            #expect((lastDirectorySync ?? .max) < (lastWrite ?? -1), "\(created.suffix(8))")
            let reopened = try tracedCalls(of: ["set-int", path, "k", "2"], environment: environment)
            #expect(!reopened.contains { $0.name == "fsync" && !$0.file.hasSuffix(".mdb") }, "\(reopened)")
            #expect(try PersistentDefaults(path: path).value(for: PersistentDefaults.Key<Int>("k", default: 0)) == 2)
        }
    }

    /// `pdinspect export` writes a temporary file and renames it into place; the rename is an
    /// entry of the directory, which syncing the file does not make durable, so a power cut after
    /// the command ended could leave the old file or none. The directory is synced after the
    /// rename (nothing synced it before).
    @Test(.enabled(if: canTrace, "needs strace with ptrace permitted (tools/setup installs strace)"))
    func anExportsDirectoryEntryIsSyncedBeforeTheCommandEnds() throws {
        try withTemporaryDirectory { path throws in
            do {
                let store = try PersistentDefaults(path: path)
                store[PersistentDefaults.Key<Int>("k", default: 0)] = 3
            }
            let directory = temporaryPath("pd-export")
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let file = directory + "/settings.json"
            let calls = try tracedCalls(of: ["export", path, file], executable: Products.pdinspect, environment: [:])
            let fileSync = calls.firstIndex { $0.name == "fsync" && $0.file.hasPrefix(file + ".pdinspect-") }
            let directorySync = calls.firstIndex { $0.name == "fsync" && $0.file == directory }
            #expect(fileSync != nil && directorySync != nil && fileSync! < directorySync!, "\(calls)")
            #expect(try String(contentsOfFile: file, encoding: .utf8).contains("\"k\""))
        }
    }

    /// Runs `executable arguments` (the fixture unless told) under strace; returns its write and
    /// sync calls, each with the path of the descriptor it used (lines look like
    /// `1234  fsync(5</tmp/…/store>) = 0`).
    private func tracedCalls(
        of arguments: [String], executable: URL = Products.fixture, environment: [String: String]
    ) throws -> [(name: String, file: String)] {
        let trace = temporaryPath("pd-trace")
        defer { try? FileManager.default.removeItem(atPath: trace) }
        let result = try runProcess(
            URL(fileURLWithPath: "/usr/bin/strace"),
            ["-f", "-y", "-qq", "-o", trace, "-e", "trace=pwrite64,pwritev,fdatasync,fsync"]
                + [executable.path] + arguments, environment: environment)
        #expect(result.status == 0 && result.exitedNormally, "\(result.output)")
        return try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n").compactMap { line in
            guard let call = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first,
                let open = call.firstIndex(of: "("), let start = line.firstIndex(of: "<"),
                let end = line[start...].firstIndex(of: ">")
            else { return nil }
            return (String(call[..<open]), String(line[line.index(after: start)..<end]))
        }
    }

    /// Runs `pd-fixture arguments` under strace; returns the names of its write and sync calls on
    /// `data.mdb`, in order (lines look like `1234  fdatasync(4</tmp/…/data.mdb>) = 0`).
    private func dataFileCalls(of arguments: [String], path: String) throws -> [String] {
        let trace = path + ".strace"
        defer { try? FileManager.default.removeItem(atPath: trace) }
        let result = try runProcess(
            URL(fileURLWithPath: "/usr/bin/strace"),
            ["-f", "-y", "-qq", "-o", trace, "-e", "trace=pwrite64,pwritev,write,writev,fdatasync,fsync,msync"]
                + [Products.fixture.path] + arguments)
        #expect(result.status == 0 && result.exitedNormally, "\(result.output)")
        return try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n")
            .filter { $0.contains("/data.mdb>") }
            .compactMap { line in line.split(separator: " ").dropFirst().first }
            .map { String($0.prefix { $0 != "(" }) }
    }

    /// Whether a sync of `data.mdb` comes after its last write.
    private func syncFollowsTheLastWrite(_ calls: [String]) throws -> Bool {
        let writes: Set<String> = ["pwrite64", "pwritev", "write", "writev"]
        let syncs: Set<String> = ["fdatasync", "fsync", "msync"]
        let lastWrite = try #require(calls.lastIndex { writes.contains($0) })
        return (calls.lastIndex { syncs.contains($0) } ?? -1) > lastWrite
    }

    /// A read-only store has no commits of its own to flush: `flush()` returns, as it does for a
    /// read-only handle that shares a writable open's environment. It threw "Permission denied"
    /// (LMDB refuses `mdb_env_sync` on an `MDB_RDONLY` environment with EACCES).
    @Test func flushingAReadOnlyStoreSucceeds() throws {
        try withTemporaryDirectory { path throws in
            do {
                let writer = try PersistentDefaults(path: path)
                writer[.launchCount] = 3
            }
            var options = PersistentDefaults.Options()
            options.readOnly = true
            for durability in [PersistentDefaults.Durability.sync, .bounded(interval: .seconds(10))] {
                options.durability = durability
                let reader = try PersistentDefaults(path: path, options: options)
                #expect(throws: Never.self, "\(durability)") { try reader.flush() }
                #expect(reader[.launchCount] == 3)
            }
        }
    }

    @Test func outOfRangeOptionsAreClampedNotFatal() throws {
        var options = PersistentDefaults.Options()
        options.maxReaders = -5
        options.initialMapSize = -1
        options.logRetention = 0
        options.durability = .bounded(interval: .seconds(Int64.max))
        try withTemporaryStore(options: options) { store, _, _ throws in
            for value in 1...3 { store[.launchCount] = value }
            #expect(store[.launchCount] == 3)
            #expect(try store.commits(after: 0).map(\.sequence) == [3])  // retention clamps to 1
            #expect(try store.statistics().maxReaders >= 1)
            try store.flush()
        }
    }

    @Test func durabilityDescribesItself() {
        #expect(PersistentDefaults.Durability.sync.description == "sync")
        #expect(PersistentDefaults.Options().durability == .sync)
        #expect(PersistentDefaults.Durability.bounded(interval: .seconds(1)).description == "bounded(1.0 seconds)")
    }
}

/// Processes that create the same store at once: LMDB serialises the creation under its lock
/// file; the library's own header check must not refuse the file another process is creating.
@Suite struct ConcurrentCreationTests {
    @Test func processesStartingTogetherOnANewStoreAllOpenIt() async throws {
        for round in 0..<8 {
            try await withTemporaryDirectoryAsync { parent in
                let path = parent + "/store-\(round)"
                let results = try await withThrowingTaskGroup(of: ProcessResult.self) { group in
                    for index in 0..<6 {
                        group.addTask { try runFixture(["set-int", path, "k\(index)", "\(index)"]) }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                #expect(results.allSatisfy { $0.status == 0 }, "\(results.map(\.output))")
                let store = try PersistentDefaults(path: path)
                for index in 0..<6 { #expect(store[PersistentDefaults.Key<Int>("k\(index)", default: -1)] == index) }
                #expect(try store.verify().isEmpty)
            }
        }
    }

    /// An empty `data.mdb` is a creation in progress or one that ended before its first commit:
    /// a writable open finishes it; a read-only open says the file is empty.
    @Test func anEmptyDataFileIsFinishedByAWritableOpenAndRefusedByAReadOnlyOne() throws {
        try withTemporaryDirectory { path throws in
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            #expect(FileManager.default.createFile(atPath: path + "/data.mdb", contents: Data()))
            var readOnly = PersistentDefaults.Options()
            readOnly.readOnly = true
            #expect(throws: PersistentDefaultsError.notAStore(path: path, reason: "data.mdb is empty")) {
                try PersistentDefaults(path: path, options: readOnly)
            }
            let store = try PersistentDefaults(path: path)
            store[.launchCount] = 3
            #expect(store[.launchCount] == 3)
        }
    }

    /// A file shorter than two pages that is not a store being made: LMDB's error, file unchanged.
    @Test func aShortFileThatIsNotAStoreIsRefusedUnchanged() throws {
        try withTemporaryDirectory { path throws in
            let bytes = Data(repeating: 0x5A, count: 3_000)
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            #expect(FileManager.default.createFile(atPath: path + "/data.mdb", contents: bytes))
            #expect(throws: PersistentDefaultsError.self) { try PersistentDefaults(path: path) }
            #expect(try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb")) == bytes)
        }
    }
}
