import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// A damaged page on which LMDB fails one of its internal assertions: LMDB alone would abort the
/// process; the library's cursor reads return an error and the process goes on.
@Suite struct DamagedPageTests {
    /// How `damagedStore(at:_:)` damages the store.
    enum Damage {
        /// Every leaf page that holds "k150" (and not "k000", so the first key's leaf stays
        /// intact) is marked a branch page: stepping onto it fails LMDB's `IS_LEAF(mp)` assertion.
        case leafMarkedBranch
        /// The node of "k150" says it holds duplicates (`F_DUPDATA`) in a database without them:
        /// stepping onto it sends LMDB through a null sub-cursor pointer (SIGSEGV).
        case nodeMarkedDuplicates
        /// The node of "k150" claims 16 MiB more data than it has: reading it runs past the end
        /// of the file (SIGBUS) or the map (SIGSEGV).
        case valueSizePastTheFile
        /// The newest commit's main-database root page holds a fill pattern, as a power cut that
        /// lost that page's write leaves it: looking a database name up faults.
        case mainRootUnwritten
    }

    /// Fills a store with 300 keys in one commit, closes it, then damages its file.
    static func damagedStore(at path: String, _ damage: Damage) throws {
        do {
            let store = try PersistentDefaults(path: path)
            try store.write { transaction in
                for index in 0..<300 {
                    transaction[PersistentDefaults.Key<String>(String(format: "k%03d", index), default: "")] =
                        String(repeating: "v", count: 200)
                }
            }
        }
        let file = path + "/data.mdb"
        if case .mainRootUnwritten = damage { return try overwriteMainDatabaseRoot(ofDataFile: file) }
        let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: file)))
        var damaged = 0
        for start in stride(from: 2 * pageSize, to: bytes.count, by: pageSize) {
            let page = bytes[start..<start + pageSize]
            // The page header: page number (8 bytes), padding (2), flags (2; P_LEAF = 2, P_BRANCH = 1).
            guard page[start + 10] == 2, page[start + 11] == 0, let at = find(page, "k150") else { continue }
            switch damage {
            case .leafMarkedBranch:
                guard find(page, "k000") == nil else { continue }
                bytes[start + 10] = 1
            case .nodeMarkedDuplicates:
                // A leaf node: data size (4 bytes), flags (2; F_DUPDATA = 4), key size (2), key.
                guard bytes[at - 2] == 4, bytes[at - 1] == 0 else { continue }
                bytes[at - 4] = 4
            case .valueSizePastTheFile:
                guard bytes[at - 2] == 4, bytes[at - 1] == 0 else { continue }
                bytes[at - 5] = 1  // The data size's high half (bytes 2–3 of the node) gains 256 << 16.
            case .mainRootUnwritten:
                continue  // Done above.
            }
            damaged += 1
        }
        #expect(damaged > 0, "no leaf page with k150 found")
        try Data(bytes).write(to: URL(fileURLWithPath: file))
    }

    /// Where `text`'s bytes start in `page`, if they occur.
    private static func find(_ page: ArraySlice<UInt8>, _ text: String) -> Int? {
        let needle = Array(text.utf8)
        return page.indices.dropLast(needle.count).first { page[$0..<$0 + needle.count].elementsEqual(needle) }
    }

    @Test func verifyReportsLMDBsAssertionAsAnErrorInsteadOfEndingTheProcess() throws {
        try withTemporaryDirectory { path throws in
            try Self.damagedStore(at: path, .leafMarkedBranch)
            let store = try PersistentDefaults(path: path)
            #expect(store[PersistentDefaults.Key<String>("k000", default: "")] == String(repeating: "v", count: 200))
            do {
                _ = try store.verify()
                Issue.record("verify() passed on a damaged store")
            } catch PersistentDefaultsError.lmdb(let code, let operation) {
                #expect(code == .assertionFailed)
                #expect(operation.contains("IS_LEAF"), "\(operation)")
                #expect("\(code)".contains("damaged"))
            }
            // The store stays usable for what the damage does not touch, on this thread and others.
            #expect(throws: PersistentDefaultsError.self) { _ = try store.keyNames() }
            #expect(store[PersistentDefaults.Key<String>("k000", default: "")].count == 200)
            let failedElsewhere = Guarded(false)
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                failedElsewhere.withLock { $0 = (try? store.verify()) == nil }
                done.signal()
            }
            #expect(done.wait(timeout: .now() + 60) == .success)
            #expect(failedElsewhere.withLock { $0 })
        }
    }

    /// An app's process, not only `pdinspect`'s, gets an error from the open and from `verify()`
    /// where LMDB follows a damaged page. Before the library installed its fault handler in every
    /// process that opens a store, the open of a store whose main database's root page a power
    /// cut left unwritten died of SIGSEGV, and so did `verify()` over the two faulting damages.
    @Test(arguments: [
        (Damage.leafMarkedBranch, "assertion"), (.nodeMarkedDuplicates, "faulted"), (.valueSizePastTheFile, "faulted"),
        (.mainRootUnwritten, "faulted"),
    ])
    func anAppOpeningOrVerifyingADamagedStoreGetsAnError(damage: Damage, says: String) throws {
        let output = try Self.storeErrorOnDamagedStore(damage, Products.fixture, ["open-verify"])
        #expect(output.contains(says) && output.contains("damaged"), "\(output)")
        #expect(output.contains("opened") == (damage != .mainRootUnwritten), "\(output)")
    }

    /// Runs `product` with `arguments` and the path of a store damaged by `damage`; expects it
    /// to exit with a store error and leave `data.mdb` as it was. Returns what it printed.
    static func storeErrorOnDamagedStore(_ damage: Damage, _ product: URL, _ arguments: [String]) throws -> String {
        try withTemporaryDirectory { path throws in
            try damagedStore(at: path, damage)
            let before = try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb"))
            let result = try runProcess(product, arguments + [path])
            #expect(result.exitedNormally && result.status == ToolExitCode.storeError.rawValue, "\(result.output)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb")) == before)
            return result.output
        }
    }

    /// The fault handler acts only inside the library's guarded reads: the app's own fault, after
    /// a store opened (and the handler was installed), still reaches the handler that was there
    /// before and ends the process with SIGSEGV.
    @Test func aFaultOutsideTheLibrarysGuardedReadsStillEndsTheProcess() throws {
        try withTemporaryDirectory { path throws in
            let result = try runProcess(Products.fixture, ["fault-after-open", path])
            #expect(result.output.contains("opened"), "\(result.output)")
            // Under ThreadSanitizer its handler was the one before: it reports the fault and exits.
            let sanitizerReport = result.output.contains("SEGV on unknown address 0x000000000008")
            #expect((!result.exitedNormally && result.status == SIGSEGV) || sanitizerReport, "\(result)")
        }
    }

    @Test(arguments: [
        (Damage.leafMarkedBranch, "assertion"), (.nodeMarkedDuplicates, "faulted"), (.valueSizePastTheFile, "faulted"),
    ])
    func pdinspectCheckPrintsOneLineAndExitsWithAStoreError(damage: Damage, says: String) throws {
        let output = try Self.storeErrorOnDamagedStore(damage, Products.pdinspect, ["check"])
        #expect(output.contains(says), "\(output)")
        #expect(output.split(separator: "\n").count == 1, "\(output)")
    }
}
