import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

/// The announcements of the wake-up channel: which logged commits an observing process may pass
/// without reading the log.
@Suite struct WakeAnnouncementTests {
    private static let a = WakeChannel.bit(forKeyNamed: "a".utf8)
    private static let b = WakeChannel.bit(forKeyNamed: "b".utf8)

    @Test func confirmedRunsWithOtherBitsArePassedAndAnythingElseIsNot() throws {
        try #require(Self.a != Self.b)
        try withTemporaryDirectory { path throws in
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            let channel = try #require(WakeChannel.attach(directory: path, create: true))
            #expect(channel.hasAnnouncements)
            // Nothing announced yet: nothing can be shown.
            #expect(!channel.noneAnnounced(meeting: Self.a, after: 0, through: 1))
            for sequence in UInt64(1)...3 {
                channel.announce(sequence: sequence, mask: Self.b)
                channel.confirm(sequence: sequence)
            }
            #expect(channel.noneAnnounced(meeting: Self.a, after: 0, through: 3))
            #expect(!channel.noneAnnounced(meeting: Self.b, after: 0, through: 3), "b changed")
            #expect(!channel.noneAnnounced(meeting: Self.a, after: 0, through: 4), "4 is not confirmed")
            // Announced but not (yet) confirmed: its commit may not be visible, or may have failed.
            channel.announce(sequence: 4, mask: Self.a)
            #expect(!channel.noneAnnounced(meeting: Self.a, after: 3, through: 4))
            // It failed; the retry at the same sequence changes b only, but a's bit stays set
            // (a spare delivery, never a missed one).
            channel.announce(sequence: 4, mask: Self.b)
            channel.confirm(sequence: 4)
            #expect(!channel.noneAnnounced(meeting: Self.a, after: 3, through: 4))
            #expect(channel.noneAnnounced(meeting: Self.a, after: 4, through: 4))
            // 5 was committed by a writer that does not announce; 6 was announced: the run breaks.
            channel.announce(sequence: 6, mask: Self.b)
            channel.confirm(sequence: 6)
            #expect(!channel.noneAnnounced(meeting: Self.a, after: 4, through: 6))
            #expect(channel.noneAnnounced(meeting: Self.a, after: 5, through: 6))
        }
    }

    @Test func theWakeUpMaskFollowsTheObserversAsTheyComeAndGo() throws {
        let c = WakeChannel.bit(forKeyNamed: "c".utf8)
        try #require(Set([Self.a, Self.b, c]).count == 3)
        try withTemporaryStore { store, path, _ throws in
            let key = { (name: String) in PersistentDefaults.Key<Int>(name, default: 0) }
            let firstA = store.observe(key("a")) { _ in }
            let secondA = store.observe(key("a")) { _ in }
            let b = store.observe(key("b")) { _ in }
            let cObserver = store.observe(key("c")) { _ in }
            #expect(ownMask(path) == Self.a | Self.b | c)
            firstA.cancel()
            #expect(ownMask(path) == Self.a | Self.b | c, "another observer of a stays")
            secondA.cancel()
            #expect(ownMask(path) == Self.b | c)
            secondA.cancel()  // A second cancel changes nothing.
            #expect(ownMask(path) == Self.b | c)
            let commits = store.observeCommits { _ in }
            #expect(ownMask(path) == Self.b | c | WakeChannel.everyCommit)
            commits.cancel()
            cObserver.cancel()
            #expect(ownMask(path) == Self.b)
            let prefix = store.observe(prefix: "group.") { _ in }
            #expect(ownMask(path) == Self.b | WakeChannel.everyCommit)
            prefix.cancel()
            b.cancel()
            #expect(ownMask(path) == 0)
        }
    }

    @Test func anOlderVersionsFileIsGrownWhenWritableAndUsedWithoutAnnouncementsOtherwise() throws {
        try withTemporaryDirectory { path throws in
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            let file = path + "/" + WakeChannel.fileName
            // The layout an older version makes: the header and the slots, 16,384 bytes.
            var older = [UInt8](repeating: 0, count: WakeChannel.slotsEnd)
            withUnsafeBytes(of: WakeChannel.header) { older.replaceSubrange(0..<8, with: $0) }
            #expect(FileManager.default.createFile(atPath: file, contents: Data(older)))
            let reader = try #require(WakeChannel.attach(directory: path, create: false))
            #expect(!reader.hasAnnouncements)
            #expect(!reader.noneAnnounced(meeting: Self.a, after: 0, through: 1))
            #expect(try fileSize(file) == WakeChannel.slotsEnd, "a process that may not create files changes none")
            let writer = try #require(WakeChannel.attach(directory: path, create: true))
            #expect(writer.hasAnnouncements)
            #expect(try fileSize(file) == WakeChannel.fileSize)
        }
    }

    @Test func aFileAnOlderVersionIsStillMakingIsNotGrownPastItsSize() throws {
        try withTemporaryDirectory { path throws in
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            let file = path + "/" + WakeChannel.fileName
            // Created, not yet sized: an older version would set 16,384 bytes next; a longer
            // mapping would then be cut short.
            #expect(FileManager.default.createFile(atPath: file, contents: Data()))
            let channel = try #require(WakeChannel.attach(directory: path, create: true))
            #expect(!channel.hasAnnouncements)
            #expect(try fileSize(file) == WakeChannel.slotsEnd)
        }
    }

    @Test func aNewFileAppearsAtItsFullSizeWithMode0600AndNoLeftovers() throws {
        try withTemporaryDirectory { path throws in
            let previous = umask(0)
            defer { umask(previous) }
            _ = try PersistentDefaults(path: path)
            let file = path + "/" + WakeChannel.fileName
            #expect(try fileSize(file) == WakeChannel.fileSize)
            let attributes = try FileManager.default.attributesOfItem(atPath: file)
            #expect((attributes[.posixPermissions] as? Int) == 0o600)
            let names = try FileManager.default.contentsOfDirectory(atPath: path)
            #expect(!names.contains { $0.hasSuffix(".new") }, "\(names)")
        }
    }

    @Test func anIdleObserverPassesOtherProcessesCommitsOfOtherKeysWithoutReadingTheLog() throws {
        var options = PersistentDefaults.Options()
        // The watcher never checks by itself here: the test runs its check.
        options.fallbackCheckInterval = .seconds(3_600)
        try withTemporaryStore(options: options) { store, path, _ throws in
            let watched = PersistentDefaults.Key<Int>("watched", default: 0)
            try #require(WakeChannel.bit(forKeyNamed: "watched".utf8) != WakeChannel.bit(forKeyNamed: "other".utf8))
            let seen = Events<KeyChange<Int>>()
            let token = store.observe(watched) { seen.append($0) }
            defer { token.cancel() }
            #expect(try runFixture(["increment", path, "other", "300"]).status == 0)
            let registry = store.core.observers
            #expect(registry.pass(through: 300, core: store.core))
            #expect(registry.passedRecords.load(ordering: .relaxed) == 300)
            #expect(registry.logReads.load(ordering: .relaxed) == 0)
            #expect(registry.deliveredSequence == 300)
            // A commit of the observed key wakes the watcher, which reads just that record.
            #expect(try runFixture(["set-int", path, "watched", "7"]).status == 0)
            #expect(seen.wait(forCount: 1))
            #expect(seen.all.map { [$0.oldValue, $0.newValue] } == [[0, 7]])
            #expect(seen.all.map(\.sequence) == [301])
            #expect(registry.logReads.load(ordering: .relaxed) == 1)
        }
    }

    @Test func aCommitOfAWriterThatCannotAnnounceIsNotPassedEvenWhenAnnouncedOnesFollow() throws {
        // Root ignores file modes: then the writer runs as nobody.
        guard geteuid() != 0 || FileManager.default.fileExists(atPath: "/usr/bin/setpriv") else {
            Issue.record("running as root needs /usr/bin/setpriv to drop to user nobody")
            return
        }
        let path = "/tmp/pd-announce-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        var options = PersistentDefaults.Options()
        options.fallbackCheckInterval = .seconds(3_600)
        let store = try PersistentDefaults(path: path, options: options)
        let watched = PersistentDefaults.Key<Int>("watched", default: 0)
        let seen = Events<KeyChange<Int>>()
        let token = store.observe(watched) { seen.append($0) }
        defer { token.cancel() }
        // The writer may write the store but not the channel file: it logs without announcing.
        #expect(chmod(path, 0o755) == 0 && chmod(path + "/data.mdb", 0o666) == 0)
        #expect(chmod(path + "/lock.mdb", 0o666) == 0 && chmod(path + "/notify", 0o444) == 0)
        let worker = "/tmp/pd-fixture-\(UUID().uuidString)"
        try FileManager.default.copyItem(
            atPath: Products.fixture.path, toPath: worker)
        defer { unlink(worker) }
        let write = ["set-int", path, "watched", "5"]
        let unannounced =
            geteuid() == 0
            ? try runProcess(
                URL(fileURLWithPath: "/usr/bin/setpriv"),
                ["--reuid=65534", "--regid=65534", "--clear-groups", worker] + write)
            : try runProcess(URL(fileURLWithPath: worker), write)
        #expect(unannounced.status == 0, "\(unannounced.output)")
        // An announced commit of another key follows it.
        #expect(try runFixture(["set-int", path, "other", "1"]).status == 0)
        let registry = store.core.observers
        #expect(!registry.pass(through: 2, core: store.core))
        #expect(registry.passedRecords.load(ordering: .relaxed) == 0)
        // The delivery that the failed pass leaves to the watcher's caller finds the change.
        registry.deliver(upTo: 2, core: store.core)
        #expect(seen.wait(forCount: 1))
        #expect(seen.all.map { [$0.oldValue, $0.newValue] } == [[0, 5]])
    }
}

/// The wake-up mask of this process's slot in the store's `notify` file (0 when it has none).
private func ownMask(_ path: String) -> UInt64 {
    guard let data = FileManager.default.contents(atPath: path + "/" + WakeChannel.fileName) else { return 0 }
    return data.withUnsafeBytes { raw in
        for index in 0..<WakeChannel.capacity {
            let offset = WakeChannel.slotsOffset + index * WakeChannel.slotSize
            if raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self) == UInt32(getpid()) {
                return raw.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)
            }
        }
        return 0
    }
}

private func fileSize(_ path: String) throws -> Int {
    try (FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? -1
}

/// The watcher of other processes' commits holds its store core strongly (a weak reference
/// slowed every retain of the core); closing the store must still free it.
@Suite struct WatcherLifetimeTests {
    @Test func aStoreWhoseObserversStartedAWatcherIsFreedWhenItsLastHandleGoes() throws {
        try withTemporaryDirectory { path throws in
            weak var freed: StoreCore?
            var tokens: [ObservationToken] = []
            do {
                let store = try PersistentDefaults(path: path)
                tokens.append(store.observe(PersistentDefaults.Key<Int>("k", default: 0)) { _ in })
                tokens.append(store.observe(prefix: "p.") { _ in })
                store[PersistentDefaults.Key<Int>("k", default: 0)] = 1
                freed = store.core
                #expect(freed != nil)
            }
            // The watcher's thread lets go of the core when it ends, soon after the close.
            #expect(eventually { freed == nil }, "the store core outlived its last handle")
            // Tokens that outlive the store cancel without effect.
            for token in tokens { token.cancel() }
            let reopened = try PersistentDefaults(path: path)
            #expect(reopened[PersistentDefaults.Key<Int>("k", default: 0)] == 1)
        }
    }
}
