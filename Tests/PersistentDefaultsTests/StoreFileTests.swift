import CLMDB
import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

private func readOnlyOptions() -> PersistentDefaults.Options {
    var options = PersistentDefaults.Options()
    options.readOnly = true
    return options
}

private func mode(_ path: String) throws -> Int {
    try #require(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
}

@Suite(.serialized) struct StoreFileTests {
    @Test func filesGetMode0600AndTheDirectory0700WhateverTheUmask() throws {
        try withTemporaryDirectory { path throws in
            let old = umask(0)
            defer { umask(old) }
            let store = try PersistentDefaults(path: path + "/nested/store")
            store[.launchCount] = 1
            #expect(try mode(store.path) == 0o700)
            #expect(try mode(store.path + "/data.mdb") == 0o600)
            #expect(try mode(store.path + "/lock.mdb") == 0o600)
        }
    }

    /// A path with a NUL byte reached `stat`, `mkdir` and LMDB cut at the NUL: the open created
    /// (or opened) the store at the part before it, another path than the one asked for.
    @Test func aPathWithANulByteIsRefused() throws {
        try withTemporaryDirectory { path throws in
            let asked = path + "/store\0/elsewhere"
            #expect(throws: PersistentDefaultsError.notAStore(path: asked, reason: "the path contains a NUL byte")) {
                try PersistentDefaults(path: asked)
            }
            #expect(!FileManager.default.fileExists(atPath: path + "/store"), "no store was created")
        }
    }

    /// A store path that is a symbolic link to a missing directory: `mkdir` met the link and
    /// `chmod` followed it, so the open failed with "chmod: No such file or directory". A loop of
    /// links gets `stat`'s error. Nothing is created at either end of the link.
    @Test func aSymbolicLinkThatLeadsNowhereIsRefusedWithAClearError() throws {
        try withTemporaryDirectory { path throws in
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            let link = path + "/store"
            try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path + "/missing")
            #expect(
                throws: PersistentDefaultsError.notAStore(path: link, reason: "a symbolic link to a missing directory")
            ) { try PersistentDefaults(path: link) }
            #expect(!FileManager.default.fileExists(atPath: path + "/missing"))
            let loop = path + "/loop"
            try FileManager.default.createSymbolicLink(atPath: loop, withDestinationPath: loop)
            #expect(throws: PersistentDefaultsError.fileSystem(path: loop, errno: ELOOP, operation: "stat")) {
                try PersistentDefaults(path: loop)
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: path).sorted() == ["loop", "store"])
        }
    }

    @Test func readOnlyNeverCreatesAStore() throws {
        try withTemporaryDirectory { path throws in
            #expect(throws: PersistentDefaultsError.notAStore(path: path, reason: "no such directory")) {
                try PersistentDefaults(path: path, options: readOnlyOptions())
            }
            #expect(FileManager.default.fileExists(atPath: path) == false)
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            #expect(throws: PersistentDefaultsError.self) {
                try PersistentDefaults(path: path, options: readOnlyOptions())
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: path).isEmpty)
        }
    }

    @Test func aReadOnlyStoreReadsAndRefusesWrites() throws {
        try withTemporaryDirectory { path throws in
            do {
                let writer = try PersistentDefaults(path: path)
                writer[.launchCount] = 3
            }
            let before = fileBytes(path + "/data.mdb")
            let store = try PersistentDefaults(path: path, options: readOnlyOptions())
            #expect(store[.launchCount] == 3)
            #expect(throws: PersistentDefaultsError.readOnly(path: store.path)) { try store.set(4, for: .launchCount) }
            #expect(throws: PersistentDefaultsError.readOnly(path: store.path)) { try store.write { _ in } }
            #expect(throws: PersistentDefaultsError.self) { try store.removeAll() }
            #expect(store[.launchCount] == 3)
            #expect(fileBytes(path + "/data.mdb") == before)
        }
    }

    /// A read-only handle opened next to a writable one shares its environment; an `EtcdMirror`
    /// made on the read-only handle wrote its ownership record to `meta` through it (no etcd is
    /// needed for that): the read-only open wrote. It throws `readOnly`, as for a read-only store.
    @Test func aMirrorOnAReadOnlyHandleNextToAWritableOneWritesNothing() throws {
        try withTemporaryDirectory { path throws in
            let writer = try PersistentDefaults(path: path)
            writer[.launchCount] = 1
            let reader = try PersistentDefaults(path: path, options: readOnlyOptions())
            let before = fileBytes(path + "/data.mdb")
            #expect(throws: PersistentDefaultsError.readOnly(path: reader.path)) {
                try EtcdMirror(
                    store: reader, endpoints: ["http://127.0.0.1:9"], etcdPrefix: "/fleet/", localPrefix: "fleet.")
            }
            #expect(fileBytes(path + "/data.mdb") == before)
            withExtendedLifetime(writer) {}
        }
    }

    @Test func pathsThatAreNoStoreGetAClearError() throws {
        try withTemporaryDirectory { path throws in
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            let file = path + "/file"
            #expect(FileManager.default.createFile(atPath: file, contents: Data("x".utf8)))
            #expect(throws: PersistentDefaultsError.notAStore(path: file, reason: "not a directory")) {
                try PersistentDefaults(path: file)
            }
            #expect(throws: PersistentDefaultsError.notAStore(path: "", reason: "the path is empty")) {
                try PersistentDefaults(path: "")
            }
            // An empty data.mdb is a creation in progress, finished by a writable open
            // (ConcurrentCreationTests); a read-only open refuses it.
            for (name, contents) in [
                ("random", Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 7919) }))
            ] {
                let directory = path + "/" + name
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                #expect(FileManager.default.createFile(atPath: directory + "/data.mdb", contents: contents))
                #expect(throws: PersistentDefaultsError.self) { try PersistentDefaults(path: directory) }
                #expect(throws: PersistentDefaultsError.self) {
                    try PersistentDefaults(path: directory, options: readOnlyOptions())
                }
                #expect(fileBytes(directory + "/data.mdb") == contents)
            }
        }
    }

    @Test func aTruncatedDataFileIsRefusedInsteadOfCrashing() throws {
        try withTemporaryDirectory { path throws in
            do {
                let store = try PersistentDefaults(path: path)
                for index in 0..<200 { store[PersistentDefaults.Key<Int>("k\(index)", default: 0)] = index }
            }
            let full = try #require(fileBytes(path + "/data.mdb"))
            for length in [100, 4096, 8192 + 100, full.count - 4096] {
                let truncated = full.prefix(length)
                try truncated.write(to: URL(fileURLWithPath: path + "/data.mdb"))
                #expect {
                    try PersistentDefaults(path: path)
                } throws: { error in
                    guard case PersistentDefaultsError.notAStore(_, let reason) = error else { return false }
                    return reason.contains("truncated")
                }
                #expect(throws: PersistentDefaultsError.self) { try PersistentDefaults.checkStore(at: path) }
                #expect(fileBytes(path + "/data.mdb") == truncated)
            }
            try Data(repeating: 0x5A, count: full.count).write(to: URL(fileURLWithPath: path + "/data.mdb"))
            #expect(throws: PersistentDefaultsError.notAStore(path: path, reason: "data.mdb is not an LMDB file")) {
                try PersistentDefaults(path: path)
            }
        }
    }

    /// LMDB writes a new file's two meta pages in one `pwrite`; on a full disk it wrote one page
    /// and the open failed. Nothing was ever committed to that file, but every later open, with
    /// space again, failed with "MDB_INVALID: File is not an LMDB file" (LMDB reads the second
    /// meta page short): the store could not be created at that path any more. Made here as
    /// LMDB leaves it: a new environment's file cut after its first page.
    @Test func aCreationThatWroteOnlyTheFirstMetaPageIsFinishedByTheNextOpen() throws {
        try withTemporaryDirectory { path throws in
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            var environment: OpaquePointer?
            #expect(mdb_env_create(&environment) == 0)
            #expect(mdb_env_open(environment, path, 0, 0o600) == 0)
            var stat = MDB_stat()
            #expect(mdb_env_stat(environment, &stat) == 0)
            mdb_env_close(environment)
            let data = path + "/data.mdb"
            #expect(truncate(data, off_t(stat.ms_psize)) == 0)
            let store = try PersistentDefaults(path: path)
            try store.set(5, for: .launchCount)
            #expect(store[.launchCount] == 5)
            #expect(try store.verify().isEmpty)
        }
    }

    @Test func aForeignLMDBEnvironmentIsNotTakenOver() throws {
        try withTemporaryDirectory { path throws in
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            try rawLMDBPut(path, [RawLMDBEntry(database: "other", key: Array("k".utf8), value: [1])])
            let before = fileBytes(path + "/data.mdb")
            #expect {
                try PersistentDefaults(path: path)
            } throws: { error in
                guard case PersistentDefaultsError.notAStore(_, let reason) = error else { return false }
                return reason.contains("no \"meta\" database")
            }
            #expect(fileBytes(path + "/data.mdb") == before)
        }
    }

    /// A refused open created the wake-up channel's `notify` file (20 KiB) before it looked at the
    /// databases: in a foreign LMDB environment, in a store of a newer format, and in an empty
    /// environment opened with `createIfMissing = false`. The directory keeps the files it had.
    @Test func aRefusedOpenAddsNoFileToTheDirectory() throws {
        try withTemporaryDirectory { base throws in
            let (foreign, newer, empty) = try refusedStoreDirectories(in: base)
            var existingOnly = PersistentDefaults.Options()
            existingOnly.createIfMissing = false
            for (path, options) in [(foreign, PersistentDefaults.Options()), (newer, .init()), (empty, existingOnly)] {
                let before = try FileManager.default.contentsOfDirectory(atPath: path).sorted()
                let data = fileBytes(path + "/data.mdb")
                #expect(throws: PersistentDefaultsError.self) { try PersistentDefaults(path: path, options: options) }
                #expect(try FileManager.default.contentsOfDirectory(atPath: path).sorted() == before, "\(path)")
                #expect(fileBytes(path + "/data.mdb") == data)
            }
        }
    }

    @Test func aNewerFormatVersionIsRefused() throws {
        try withTemporaryDirectory { path throws in
            do { _ = try PersistentDefaults(path: path) }
            try rawLMDBPut(
                path, [RawLMDBEntry(database: "meta", key: Array("format-version".utf8), value: [0, 0, 0, 2])])
            #expect(throws: PersistentDefaultsError.unsupportedFormatVersion(found: 2, supported: 1)) {
                try PersistentDefaults(path: path)
            }
            #expect(throws: PersistentDefaultsError.unsupportedFormatVersion(found: 2, supported: 1)) {
                try PersistentDefaults(path: path, options: readOnlyOptions())
            }
        }
    }

    /// A `format-version` of 0 (`00 00 00 00`) was accepted as older than 1; no format has
    /// version 0. The open is refused, read-only or not, and changes no byte of the file.
    @Test func formatVersionZeroIsRefused() throws {
        try withTemporaryDirectory { path throws in
            do { _ = try PersistentDefaults(path: path) }
            try rawLMDBPut(
                path, [RawLMDBEntry(database: "meta", key: Array("format-version".utf8), value: [0, 0, 0, 0])])
            let before = fileBytes(path + "/data.mdb")
            let refused = PersistentDefaultsError.notAStore(
                path: path, reason: "the format version is 0, which no version of the format has")
            #expect(throws: refused) { try PersistentDefaults(path: path) }
            #expect(throws: refused) { try PersistentDefaults(path: path, options: readOnlyOptions()) }
            #expect(fileBytes(path + "/data.mdb") == before)
        }
    }

    @Test func oneEnvironmentPerPathIsShared() throws {
        try withTemporaryDirectory { path throws in
            let first = try PersistentDefaults(path: path)
            var second: PersistentDefaults? = try PersistentDefaults(
                path: path + "/../" + (path as NSString).lastPathComponent)
            #expect(second?.path == first.path)
            second?[.launchCount] = 8
            #expect(first[.launchCount] == 8)
            second = nil
            first[.launchCount] = 9
            #expect(first[.launchCount] == 9)
            #expect(try first.statistics().readers <= 2)
            var bounded = PersistentDefaults.Options()
            bounded.durability = .bounded(interval: .seconds(1))
            #expect(throws: PersistentDefaultsError.self) { try PersistentDefaults(path: path, options: bounded) }
        }
    }

    @Test func statisticsDescribeTheStore() throws {
        try withTemporaryStore { store, _, _ throws in
            try store.write { tx in
                tx[.launchCount] = 1
                tx[.recent] = ["a"]
            }
            let stats = try store.statistics()
            #expect(stats.formatVersion == 1)
            #expect(stats.values.entries == 2)
            #expect(stats.log.entries == 1)
            #expect(stats.logRange == 1...1)
            #expect(stats.pageSize == 4096)
            #expect(stats.usedBytes <= stats.mapSize)
            #expect(stats.dataFileSize > 0)
            #expect(stats.lockFileSize > 0)
            #expect(stats.maxReaders == 126)
        }
    }

    @Test func aCompactCopyOpensWithTheSameData() throws {
        try withTemporaryStore { store, path, _ throws in
            for value in 0..<50 { store[.launchCount] = value }
            let copy = path + "-copy"
            try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: copy) }
            try store.copy(to: copy, compact: true)
            let reopened = try PersistentDefaults(path: copy, options: readOnlyOptions())
            #expect(reopened[.launchCount] == 49)
            #expect(try reopened.lastSequence() == 50)
        }
    }

    @Test func resultCodesMatchTheCMacros() {
        let pairs: [(LMDBResultCode, Int32)] = [
            (.keyExists, MDB_KEYEXIST), (.notFound, MDB_NOTFOUND), (.pageNotFound, MDB_PAGE_NOTFOUND),
            (.corrupted, MDB_CORRUPTED), (.panic, MDB_PANIC), (.versionMismatch, MDB_VERSION_MISMATCH),
            (.invalid, MDB_INVALID), (.mapFull, MDB_MAP_FULL), (.databasesFull, MDB_DBS_FULL),
            (.readersFull, MDB_READERS_FULL), (.transactionFull, MDB_TXN_FULL), (.mapResized, MDB_MAP_RESIZED),
            (.incompatible, MDB_INCOMPATIBLE), (.badReaderSlot, MDB_BAD_RSLOT), (.badTransaction, MDB_BAD_TXN),
            (.badValueSize, MDB_BAD_VALSIZE), (.badDatabaseHandle, MDB_BAD_DBI),
        ]
        for (code, macro) in pairs { #expect(code.rawValue == macro) }
        #expect(LMDBResultCode.mapFull.description == "MDB_MAP_FULL: Environment mapsize limit reached")
    }
}
