import Foundation
import PDTestSupport
import PersistentDefaults
import Synchronization
import Testing

/// Whether this process may mount a tmpfs (root with CAP_SYS_ADMIN), tried once; for the tests
/// that need a small file system (a full disk).
let canMountTmpfs: Bool = {
    guard geteuid() == 0 else { return false }
    let probe = temporaryPath("pd-probe")
    defer { try? FileManager.default.removeItem(atPath: probe) }
    guard (try? FileManager.default.createDirectory(atPath: probe, withIntermediateDirectories: false)) != nil,
        (try? command("/bin/mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", probe])) == 0
    else { return false }
    _ = try? command("/bin/umount", [probe])
    return true
}()

/// Runs `path` with `arguments`; returns its exit status.
@discardableResult
func command(_ path: String, _ arguments: [String]) throws -> Int32 {
    try runProcess(URL(fileURLWithPath: path), arguments).status
}

@Suite("Reliability: concurrency")
struct ConcurrencyReliabilityTests {
    /// Durable sets from 4 threads share commits (group commit); each `set` returns only after
    /// the commit holding it. Killed mid-run, every acknowledged value must be in the store
    /// (a later, unacknowledged one may be too), and the log must agree with the data.
    @Test func groupCommittedSetsThatReturnedSurviveAKill() throws {
        try withTemporaryDirectory { path throws in
            for round in 0..<3 {
                let child = try ChildProcess(fixture: ["set-loop", path, "4"])
                #expect(child.wait(for: "ack 3 \(20 * (round + 1))"), "\(child.text.suffix(200))")
                child.kill()
                var acknowledged: [String: Int] = [:]
                for line in child.text.split(separator: "\n") {
                    let fields = line.split(separator: " ")
                    guard fields.count == 3, fields[0] == "ack", let value = Int(fields[2]) else { continue }
                    acknowledged["k\(fields[1])"] = max(acknowledged["k\(fields[1])"] ?? 0, value)
                }
                let store = try PersistentDefaults(path: path)
                #expect(try store.verify().isEmpty)
                for (name, value) in acknowledged {
                    #expect(store[PersistentDefaults.Key<Int>(name, default: 0)] >= value, "\(name)")
                }
                #expect(acknowledged.count == 4)
            }
        }
    }

    /// 4 processes × 4 threads × 500 transactional increments, with readers in this process
    /// checking that the two keys each transaction sets are never seen apart. The workers use
    /// `.bounded` durability to keep the test short; it changes when pages reach the disk, not
    /// how writers are serialised.
    @Test func fourProcessesOfFourThreadsEndAtExactly8000AndReadersSeeNoTornUpdate() async throws {
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)
            let counter = PersistentDefaults.Key<Int>("counter", default: 0)
            let mirror = PersistentDefaults.Key<Int>("mirror", default: 0)
            let finished = Atomic<Bool>(false)
            let reads = Counter()
            let torn = Counter()
            let readerDone = DispatchSemaphore(value: 0)
            DispatchQueue.global().async {
                while !finished.load(ordering: .acquiring) {
                    let pair = try? store.read { ($0[counter], $0[mirror]) }
                    if let pair, pair.0 != pair.1 { torn.increment() }
                    reads.increment()
                }
                readerDone.signal()
            }
            let workers = (0..<4).map { _ in
                Task.detached {
                    try runFixture(["hammer", path, "4", "500"], environment: ["PD_DURABILITY": "bounded"])
                }
            }
            var results: [ProcessResult] = []
            for worker in workers { results.append(try await worker.value) }
            finished.store(true, ordering: .releasing)
            #expect(readerDone.wait(timeout: .now() + 10) == .success)
            #expect(results.map(\.status) == [0, 0, 0, 0], "\(results.map(\.output))")
            #expect(try store.read { [$0[counter], $0[mirror]] } == [8_000, 8_000])
            #expect(try store.lastSequence() == 8_000)
            #expect(torn.value == 0)
            #expect(reads.value > 0)
            #expect(try store.verify().isEmpty)
        }
    }
}

@Suite("Reliability: faults")
struct FaultReliabilityTests {
    @Test(.enabled(if: canMountTmpfs, "mounting a 1 MiB tmpfs needs root with CAP_SYS_ADMIN"))
    func aFullDiskGivesAClearErrorKeepsEarlierDataAndWritesWorkOnceSpaceIsFreed() throws {
        try withTemporaryDirectory { mount throws in
            try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: false)
            #expect(try command("/bin/mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mount]) == 0)
            defer { _ = try? command("/bin/umount", [mount]) }
            let filler = mount + "/filler"
            try Data(repeating: 0, count: 512 << 10).write(to: URL(fileURLWithPath: filler))
            let path = mount + "/store"
            let blob = { (index: Int) in PersistentDefaults.Key<Data>("blob.\(index)", default: Data()) }
            var written = 0
            do {
                let store = try PersistentDefaults(path: path)
                store[.launchCount] = 42
                var failure: (any Error)?
                while failure == nil, written < 100 {
                    do {
                        try store.set(Data(repeating: UInt8(written), count: 64 << 10), for: blob(written))
                        written += 1
                    } catch {
                        failure = error
                    }
                }
                let error = try #require(failure as? PersistentDefaultsError)
                #expect(error.code?.rawValue == ENOSPC, "\(error)")
                #expect(error.description.contains("the file system is full"), "\(error)")
                #expect(written >= 1)
                // Earlier data intact, in this process and after the failed commit.
                #expect(store[.launchCount] == 42)
                #expect(try store.value(for: blob(written - 1)) == Data(repeating: UInt8(written - 1), count: 64 << 10))
                #expect(try store.verify().isEmpty)
                #expect(try store.lastSequence() == UInt64(written + 1))
                // Space freed: the same handle writes again.
                try FileManager.default.removeItem(atPath: filler)
                try store.set(Data(repeating: 0xEE, count: 64 << 10), for: blob(written))
            }
            let reopened = try PersistentDefaults(path: path)
            #expect(reopened[.launchCount] == 42)
            #expect(try reopened.value(for: blob(written)).first == 0xEE)
            #expect(try reopened.verify().isEmpty)
        }
    }

    /// Opening (creating) a store on a file system with little or no space left must fail with
    /// an error, not kill the process: LMDB sizes `lock.mdb` with `ftruncate` and writes its
    /// header through a shared map, and so does the wake-up channel with `notify`; a store into a
    /// page that the full file system cannot give raises SIGBUS. Run in a child (the fixture),
    /// with 0 to 60 KiB left. (Before: the child died of SIGBUS with 0, 12 and 24 KiB left.)
    @Test(.enabled(if: canMountTmpfs, "mounting a tmpfs needs root with CAP_SYS_ADMIN"))
    func openingAStoreOnAFullDiskThrowsInsteadOfCrashing() throws {
        try withTemporaryDirectory { mount throws in
            try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: false)
            #expect(try command("/bin/mount", ["-t", "tmpfs", "-o", "size=256k", "tmpfs", mount]) == 0)
            defer { _ = try? command("/bin/umount", [mount]) }
            for left in stride(from: 0, through: 60 << 10, by: 4 << 10) {
                let filler = mount + "/filler"
                try Data(count: (256 << 10) - left).write(to: URL(fileURLWithPath: filler))
                let path = mount + "/store\(left)"
                let full = try runFixture(["set-int", path, "k", "1"])
                #expect(full.exitedNormally, "\(left) bytes left: killed by signal \(full.status): \(full.output)")
                #expect(full.status == 0 || full.output.contains("No space left"), "\(left): \(full.output)")
                try FileManager.default.removeItem(atPath: filler)
                // With space again the store opens and writes (with 12 KiB left, LMDB had written
                // one of the two meta pages: see `aCreationThatWroteOnlyTheFirstMetaPageIsFinishedByTheNextOpen`).
                let freed = try runFixture(["set-int", path, "k", "2"])
                #expect(freed.exitedNormally && freed.status == 0, "\(left) bytes left, then freed: \(freed.output)")
                try? FileManager.default.removeItem(atPath: path)
            }
        }
    }

    @Test func aFileSizeLimitGivesAClearErrorAndEarlierDataSurvives() throws {
        try withTemporaryDirectory { path throws in
            let child = try ChildProcess(fixture: ["fill", path, "\(512 << 10)"])
            child.process.waitUntilExit()
            #expect(child.wait(for: "error:"))
            #expect(child.process.terminationStatus == 0, "\(child.text)")
            #expect(child.text.contains("File too large"), "\(child.text)")
            let written = try #require(
                child.text.split(separator: "\n").first { $0.hasPrefix("wrote ") }.flatMap { Int($0.dropFirst(6)) })
            #expect(written >= 1)
            let store = try PersistentDefaults(path: path)
            #expect(try store.verify().isEmpty)
            #expect(try store.lastSequence() == UInt64(written))
            for index in 0..<written {
                let key = PersistentDefaults.Key<Data>("blob.\(index)", default: Data())
                #expect(try store.value(for: key) == Data(repeating: UInt8(index), count: 64 << 10))
            }
            // Without the limit, writing works again.
            try store.set(
                Data(repeating: 1, count: 64 << 10), for: PersistentDefaults.Key<Data>("after", default: Data()))
            #expect(try store.verify().isEmpty)
        }
    }

    @Test(
        .enabled(
            if: geteuid() == 0 && FileManager.default.fileExists(atPath: "/usr/bin/setpriv"),
            "needs root to switch to user nobody, since root ignores file permissions"))
    func aReadOnlyDirectoryOfAnotherUserReadsAndRefusesWritesClearly() throws {
        let path = "/tmp/pd-readonly-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let store = try PersistentDefaults(path: path)
            try store.set(7, for: PersistentDefaults.Key<Int>("answer", default: 0))
        }
        // The worker must be reachable by nobody: copy it next to the store's parent.
        let worker = "/tmp/pd-fixture-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: worker) }
        try FileManager.default.copyItem(atPath: Products.fixture.path, toPath: worker)
        #expect(try command("/bin/chown", ["-R", "65534:65534", path]) == 0)
        #expect(
            chmod(path + "/data.mdb", 0o400) == 0 && chmod(path + "/lock.mdb", 0o400) == 0 && chmod(path, 0o500) == 0)
        let before = fileBytes(path + "/data.mdb")
        let output = try runProcess(
            URL(fileURLWithPath: "/usr/bin/setpriv"),
            ["--reuid=65534", "--regid=65534", "--clear-groups", worker, "probe-read-only", path, "answer"]
        ).output
        #expect(output.contains("read: 7"), "\(output)")
        #expect(output.contains("write: store \(path) is open read-only; writes are refused"), "\(output)")
        #expect(output.contains("writable open: ") && output.contains("Permission denied"), "\(output)")
        #expect(fileBytes(path + "/data.mdb") == before)
        _ = chmod(path, 0o700)
    }

    /// Without write access to `lock.mdb` a read-only open runs without LMDB's lock file
    /// (MDB_NOLOCK), which is safe only when no other process has the store open: a writer that
    /// cannot see this reader reuses pages it is reading (915–982 of 1,000 reads went wrong). With
    /// a live writer the open must refuse, naming the reason; once the writer is gone it reads.
    @Test(
        .enabled(
            if: geteuid() == 0 && FileManager.default.fileExists(atPath: "/usr/bin/setpriv"),
            "needs root to switch to user nobody, since root ignores file permissions"))
    func aLocklessReadOnlyOpenRefusesWhileAnotherProcessHasTheStoreOpen() throws {
        let path = "/tmp/pd-readonly-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        do { try PersistentDefaults(path: path).set(7, for: PersistentDefaults.Key<Int>("answer", default: 0)) }
        let worker = "/tmp/pd-fixture-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: worker) }
        try FileManager.default.copyItem(atPath: Products.fixture.path, toPath: worker)
        #expect(try command("/bin/chown", ["-R", "65534:65534", path]) == 0)
        #expect(
            chmod(path + "/data.mdb", 0o400) == 0 && chmod(path + "/lock.mdb", 0o400) == 0 && chmod(path, 0o500) == 0)
        defer { _ = chmod(path, 0o700) }
        let probe = {
            try runProcess(
                URL(fileURLWithPath: "/usr/bin/setpriv"),
                ["--reuid=65534", "--regid=65534", "--clear-groups", worker, "probe-read-only", path, "answer"]
            ).output
        }
        // Root ignores the modes, so this writer opens the store with its lock file.
        let writer = try ChildProcess(fixture: ["crash-writer", path, "5"], environment: ["PD_DURABILITY": "bounded"])
        #expect(writer.wait(for: "ack 20 "), "\(writer.text.suffix(200))")
        let refused = try probe()
        writer.kill()
        #expect(!refused.contains("read: "), "\(refused)")
        #expect(
            refused.contains("read-only open: ") && refused.contains("process \(writer.process.processIdentifier)")
                && refused.contains("lock.mdb"), "\(refused)")
        // The writer is gone (killed: its fcntl lock went with it): the lockless open reads.
        let afterwards = try probe()
        #expect(afterwards.contains("read: 7"), "\(afterwards)")
    }

    /// A failed mmap while adopting another process's map size (here under RLIMIT_AS) left LMDB
    /// with its old map unmapped and the next call crashed. It must throw, and the same handle
    /// must read afterwards; the store must be intact.
    @Test func aMapSizeThatCannotBeMappedThrowsAndLeavesTheStoreUsable() throws {
        try withTemporaryDirectory { path throws in
            let answer = PersistentDefaults.Key<Int>("answer", default: -1)
            let blob = PersistentDefaults.Key<Data>("blob", default: Data())
            do { try PersistentDefaults(path: path).set(7, for: answer) }
            let child = try ChildProcess(fixture: ["map-under-limit", path])
            defer { if child.process.isRunning { child.kill() } }
            #expect(child.wait(for: "limited"), "\(child.text)")
            do {
                // A 1 GiB map (address space only) recorded in the meta page, and data past the
                // child's 1 MiB map, so that its next read must adopt the 1 GiB map.
                var options = PersistentDefaults.Options()
                options.initialMapSize = 1 << 30
                try PersistentDefaults(path: path, options: options).set(
                    Data(repeating: 0xCD, count: 4 << 20), for: blob)
            }
            #expect(child.wait(for: "write: ", timeout: 60), "\(child.text)")
            child.process.waitUntilExit()
            #expect(child.process.terminationReason == .exit, "killed by signal \(child.process.terminationStatus)")
            #expect(child.process.terminationStatus == 0, "\(child.text)")
            #expect(
                child.text.contains("error: mdb_env_set_mapsize(0) (mapping the store at the size another process set"),
                "\(child.text)")
            #expect(child.text.contains("Cannot allocate memory"), "\(child.text)")
            #expect(child.text.contains("after: 7 \(4 << 20)"), "\(child.text)")
            let store = try PersistentDefaults(path: path)
            #expect(try store.verify().isEmpty)
            #expect(try store.value(for: blob) == Data(repeating: 0xCD, count: 4 << 20))
            #expect([7, 8].contains(store[answer]))
        }
    }

    /// Opening a store that another process is writing must not mistake the file for a
    /// truncated one: the meta pages may name pages written after the file size was taken.
    @Test func checkingAStoreThatAnotherProcessIsGrowingNeverCallsItTruncated() throws {
        try withTemporaryDirectory { path throws in
            let writer = try ChildProcess(
                fixture: ["crash-writer", path, "11"], environment: ["PD_DURABILITY": "bounded"])
            defer { writer.kill() }
            #expect(writer.wait(for: "ack 100 "))
            var failures: [String] = []
            for _ in 0..<3_000 {
                do {
                    try PersistentDefaults.checkStore(at: path)
                } catch {
                    failures.append("\(error)")
                }
            }
            #expect(writer.process.isRunning)
            #expect(failures.isEmpty, "\(failures.count) failures, first: \(failures.first ?? "")")
        }
    }

    /// Another process grows the map three times while this process keeps writing and reading.
    @Test func aMapGrownByAnotherProcessWhileThisOneWritesAndReads() throws {
        try withTemporaryStore { store, path, log throws in
            let finished = Atomic<Bool>(false)
            let increments = Counter()
            let failures = Counter()
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                while !finished.load(ordering: .acquiring) {
                    do {
                        try store.write { $0[.launchCount] += 1 }
                        increments.increment()
                        _ = try store.read { $0[.launchCount] }
                    } catch {
                        failures.increment()
                    }
                }
                done.signal()
            }
            for (index, size) in [3 << 20, 6 << 20, 12 << 20].enumerated() {
                let result = try runFixture(["set-bytes", path, "blob\(index)", "\(size)"])
                #expect(result.status == 0, "\(result.output)")
            }
            finished.store(true, ordering: .releasing)
            #expect(done.wait(timeout: .now() + 10) == .success)
            #expect(failures.value == 0)
            #expect(store[.launchCount] == increments.value)
            #expect(try store.value(for: PersistentDefaults.Key<Data>("blob2", default: Data())).count == 12 << 20)
            #expect(try store.statistics().mapSize >= 12 << 20)
            #expect(log.all.isEmpty, "\(log.all)")
            #expect(try store.verify().isEmpty)
        }
    }

    @Test func aFullReaderTableGivesAClearErrorNotAHangAndFreesUp() throws {
        var options = PersistentDefaults.Options()
        options.maxReaders = 4
        options.readerSlotWait = .milliseconds(200)  // The read waits that long, then throws.
        try withTemporaryStore(options: options) { store, _, _ throws in
            store[.launchCount] = 1
            let entered = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let holdersDone = DispatchGroup()
            for _ in 0..<4 {
                // Threads of their own: blocked holders must not starve Dispatch's small pool.
                holdersDone.enter()
                Thread.detachNewThread {
                    _ = try? store.read { _ in
                        entered.signal()
                        release.wait()
                    }
                    holdersDone.leave()
                }
            }
            for _ in 0..<4 { #expect(entered.wait(timeout: .now() + 10) == .success) }
            #expect {
                try store.read { $0[.launchCount] }
            } throws: { error in
                (error as? PersistentDefaultsError)?.code == .readersFull
            }
            for _ in 0..<4 { release.signal() }
            #expect(holdersDone.wait(timeout: .now() + 10) == .success)
            #expect(try store.read { $0[.launchCount] } == 1)
        }
    }

    @Test func readerSlotsOfKilledProcessesAreReclaimedAtOpen() throws {
        try withTemporaryDirectory { path throws in
            var options = PersistentDefaults.Options()
            options.maxReaders = 5
            do { try PersistentDefaults(path: path, options: options).set(3, for: .launchCount) }
            let environment = ["PD_MAX_READERS": "5"]
            // A live process keeps the lock file in use, so that LMDB does not reset the table.
            let keeper = try ChildProcess(fixture: ["hold-read", path], environment: environment)
            defer { keeper.kill() }
            #expect(keeper.wait(for: "holding"))
            let victims = try (0..<4).map { _ in
                try ChildProcess(fixture: ["hold-read", path], environment: environment)
            }
            for victim in victims { #expect(victim.wait(for: "holding")) }
            for victim in victims { victim.kill() }
            // Every slot is now taken: one live reader and four dead ones.
            let store = try PersistentDefaults(path: path, options: options)
            #expect(try store.read { $0[.launchCount] } == 3)
            let readers = Set(store.readerTableEntries().map(\.processID))
            #expect(readers.contains(keeper.process.processIdentifier), "\(store.readerTable())")
            for victim in victims {
                #expect(!readers.contains(victim.process.processIdentifier), "\(store.readerTable())")
            }
            #expect(try store.clearStaleReaders() == 0)
        }
    }
}

@Suite("Reliability: bad input and the crash checker")
struct BadInputReliabilityTests {
    @Test func aHundredThousandRandomAndMutatedInputsNeverCrashTheDecoders() {
        let figures = DecoderFuzzer.run(seed: 7, inputs: 100_000)
        #expect(figures.inputs == 100_000)
        #expect(figures.problems.isEmpty, "\(figures.problems)")
        #expect(figures.valuesDecoded > 0 && figures.valuesRefused > 0)
        #expect(figures.recordsDecoded > 0 && figures.recordsRefused > 0)
    }

    @Test func theRecordDecoderReadsTheDocumentedFormatAndRefusesATruncatedRecord() throws {
        // Record format 1 as the format documentation gives it: one change setting "k" to the Int 3.
        let value: [UInt8] = [0x02, 0, 0, 0, 0, 0, 0, 0, 3]
        let bytes: [UInt8] =
            [1] + [0, 0, 0, 0, 0, 0, 0, 1] + [0, 0, 0, 42] + [0, 0, 0, 1] + [0, 1, 0x6B] + [1, 0, 0, 0, 9] + value
        let record = try CommitRecord.decode(sequence: 5, encodedRecord: bytes)
        #expect(record.sequence == 5 && record.processID == 42)
        #expect(record.changes == [CommitRecord.Change(key: "k", encodedValue: value)])
        #expect(throws: PersistentDefaultsError.self) {
            try CommitRecord.decode(sequence: 5, encodedRecord: bytes.dropLast())
        }
    }

    @Test func theCrashCheckerPassesAnHonestStoreAndCatchesALostOrTornCommit() throws {
        try withTemporaryDirectory { path throws in
            let acknowledged = Guarded<[(number: UInt64, entries: [CrashPayload.Entry])]>([])
            try CrashWriter.run(path: path, seed: 9, options: .init(), limit: 40) { number, entries in
                acknowledged.withLock { $0.append((number, entries)) }
            }
            let report = WriterReport(processID: getpid(), acknowledged: acknowledged.withLock { $0 })
            #expect(report.acknowledged.map(\.number) == Array(1...40))
            var honest = CrashChecker()
            #expect(honest.check(path: path, writers: [report]) == [])
            #expect(honest.acknowledgedChecked == 40)

            var lost = report
            lost.acknowledged.append((41, [CrashPayload.Entry(index: 0, length: 1)]))
            var checker = CrashChecker()
            #expect(checker.check(path: path, writers: [lost]).contains { $0.contains("#41 is missing") })

            // Half a transaction: one key gets another transaction's value, outside the protocol.
            let store = try PersistentDefaults(path: path)
            try store.set(
                CrashPayload.value(number: 99, length: 3),
                for: PersistentDefaults.Key<Data>(CrashPayload.keyName(0), default: Data()))
            var torn = CrashChecker()
            #expect(!torn.check(path: path, writers: [report]).isEmpty)
        }
    }

    /// A one-character relative path used to trap inside Foundation (`deletingLastPathComponent`).
    @Test(arguments: ["s", "s/", "settings", "a/b", "./c"])
    func aRelativeStorePathOpensWithoutCrashing(_ relative: String) throws {
        try withTemporaryDirectory { directory throws in
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
            let result = try runProcess(
                Products.fixture, ["set-int", relative, "answer", "42"],
                directory: directory)
            #expect(result.exitedNormally && result.status == 0, "\(result.output)")
            let store = try PersistentDefaults(path: directory + "/" + relative)
            #expect(store[PersistentDefaults.Key<Int>("answer", default: 0)] == 42)
        }
    }

    @Test func acknowledgementLinesRoundTrip() {
        let entries = [CrashPayload.Entry(index: 3, length: 17), CrashPayload.Entry(index: 15, length: nil)]
        let line = CrashWriter.acknowledgement(number: 12, entries: entries)
        #expect(line == "ack 12 3:17,15:-")
        #expect(CrashWriter.parseAcknowledgement(line[...])?.entries == entries)
        #expect(CrashWriter.parseAcknowledgement("ack 12 3:1") != nil)
        #expect(CrashWriter.parseAcknowledgement("ack 12 3:") == nil)
        #expect(CrashWriter.parseAcknowledgement("ack 12 16:1") == nil)
    }
}
