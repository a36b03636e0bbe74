import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

#if canImport(Glibc)
    import Glibc
#endif

private struct ForeignError: Error, CustomStringConvertible {
    var description: String { "a foreign failure" }
}

/// `PersistentDefaultsError`'s own cases for misuse, and matching errors by their result code.
@Suite("Errors: cases and result-code patterns")
struct ErrorTests {
    @Test func aSnapshotOrTransactionUsedAfterItsClosureSaysSo() throws {
        try withTemporaryStore { store, _, _ throws in
            let snapshot = try store.read { $0 }
            let error = #expect(throws: PersistentDefaultsError.self) { try snapshot.storedValue(named: "a") }
            #expect(error == .usedAfterClosure(type: "Snapshot"))
            #expect(error?.code == nil, "not an LMDB failure")
            #expect(error?.description.contains("Snapshot was used after the closure") == true)
            let transaction = try store.write { $0 }
            #expect(throws: PersistentDefaultsError.usedAfterClosure(type: "WriteTransaction")) {
                try transaction.remove(PersistentDefaults.Keys(name: "a"))
            }
            #expect(throws: PersistentDefaultsError.usedAfterClosure(type: "WriteTransaction")) {
                try transaction.setStoredValue(.int(1), named: "a")
            }
            #expect(try store.keyNames().isEmpty, "nothing was written")
        }
    }

    @Test func aClosedStoreThrowsStoreClosed() throws {
        try withTemporaryDirectory { path in
            var core: StoreCore?
            do {
                let store = try PersistentDefaults(path: path)
                store[.launchCount] = 1
                core = store.core
            }
            let kept = try #require(core)
            let error = #expect(throws: PersistentDefaultsError.self) { try kept.environment.withRead { _ in 0 } }
            #expect(error == .storeClosed(path: kept.path, reason: nil))
            #expect(error?.description == "store \(kept.path) is closed")
            #expect(throws: PersistentDefaultsError.storeClosed(path: kept.path, reason: nil)) {
                try kept.environment.copy(to: path + "/copy", compact: false)
            }
        }
    }

    @Test func anErrorFromOutsideTheLibraryIsReportedAsUnknown() {
        let log = ErrorLog()
        let reporter = ErrorReporter(handler: { log.append($0) })
        reporter.report(ForeignError())
        reporter.report(PersistentDefaultsError.nestedWrite)
        #expect(log.all == [.unknown(description: "a foreign failure"), .nestedWrite])
        #expect(log.all.first?.description == "a foreign failure")
        #expect(log.all.first?.code == nil)
    }

    @Test func anErrorMatchesItsResultCodeInACatchClause() throws {
        try withTemporaryStore { store, path, _ throws in
            store[.launchCount] = 1
            // A real failure: the destination directory does not exist (ENOENT from open).
            var caught = false
            do {
                try store.copy(to: path + "/missing", compact: false)
            } catch LMDBResultCode.mapFull {
                Issue.record("a missing directory is not a full map")
            } catch LMDBResultCode(rawValue: ENOENT) {
                caught = true
            }
            #expect(caught)
        }
    }

    @Test func aTypedThrowMatchesItsResultCode() throws {
        try withTemporaryDirectory { path in
            try Data("a file".utf8).write(to: URL(fileURLWithPath: path))
            var caught: LMDBResultCode?
            do throws(PersistentDefaultsError) {
                // stat fails with ENOTDIR: the path goes through a regular file.
                try PersistentDefaults.checkStore(at: path + "/store")
            } catch LMDBResultCode(rawValue: ENOTDIR) {
                caught = LMDBResultCode(rawValue: ENOTDIR)
            } catch {
                Issue.record("unexpected \(error)")
            }
            #expect(caught == LMDBResultCode(rawValue: ENOTDIR))
        }
    }

    @Test func aResultCodePatternMatchesOnlyErrorsWithThatCode() {
        let mapFull: any Error = PersistentDefaultsError.lmdb(code: .mapFull, operation: "mdb_put")
        let noSpace: any Error = PersistentDefaultsError.fileSystem(path: "/x", errno: ENOSPC, operation: "write")
        func kind(_ error: any Error) -> String {
            switch error {
            case LMDBResultCode.mapFull: "map full"
            case LMDBResultCode(rawValue: ENOSPC): "no space"
            case LMDBResultCode.notFound: "not found"
            default: "other"
            }
        }
        #expect(kind(mapFull) == "map full")
        #expect(kind(noSpace) == "no space")
        #expect(kind(PersistentDefaultsError.invalidKeyName("", reason: "empty")) == "other")
        #expect(kind(PersistentDefaultsError.usedAfterClosure(type: "Snapshot")) == "other")
        #expect(kind(ForeignError()) == "other")
        #expect(!(LMDBResultCode.notFound ~= mapFull))
        #expect(LMDBResultCode.mapFull ~= PersistentDefaultsError.lmdb(code: .mapFull, operation: "mdb_put"))
    }
}

@Suite("Inspection: parsing the reader table")
struct ReaderTableParsingTests {
    @Test func linesOfMdbReaderListBecomeEntries() {
        let table = "    pid     thread     txnid\n     4242 7f3a1c000700 17\n       99 1a2b -\n"
        #expect(
            ReaderTableEntry.parse(table) == [
                ReaderTableEntry(processID: 4242, thread: 0x7f3a_1c00_0700, transactionID: 17),
                ReaderTableEntry(processID: 99, thread: 0x1a2b, transactionID: nil),
            ])
        #expect(ReaderTableEntry.parse("(no active readers)\n").isEmpty)
        #expect(ReaderTableEntry.parse("").isEmpty)
        #expect(ReaderTableEntry.parse("  12 zz 3\n  x 1 2\n  5 1 y\n").isEmpty, "malformed lines are skipped")
    }
}
