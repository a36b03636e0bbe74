import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

/// `verify()` checks LMDB's page accounting: every page is a meta page, a database's page or on
/// the free-page list.
@Suite struct PageAccountingTests {
    @Test func aStoreAfterManyCommitsAccountsForEveryPage() throws {
        var options = PersistentDefaults.Options()
        options.durability = .bounded(interval: .seconds(10))
        options.logRetention = 100
        try withTemporaryStore(options: options) { store, _, _ throws in
            for index in 0..<3_000 {
                store[PersistentDefaults.Key<Int>("k\(index % 50)", default: 0)] = index
                if index % 100 == 0 {
                    try store.set(
                        Data(repeating: UInt8(index % 256), count: 20_000), for: .init("big", default: Data()))
                }
                if index % 7 == 0 { try store.remove(PersistentDefaults.Key<Int>("k\(index % 13)", default: 0)) }
            }
            let accounting = try #require(try store.core.pageAccounting())
            #expect(accounting.counted == accounting.expected)
            #expect(accounting.expected > 10)
            #expect(try store.verify().isEmpty)
        }
    }

    @Test func pagesThatNoDatabaseNorTheFreeListHoldsAreReported() throws {
        try withTemporaryDirectory { path throws in
            do {
                let store = try PersistentDefaults(path: path)
                for index in 0..<100 { store[PersistentDefaults.Key<Int>("k\(index)", default: 0)] = index }
                #expect(try store.verify().isEmpty)
            }
            // Five pages that nothing accounts for: the file grows by five pages and both meta
            // pages' last page number (mm_last_pg, byte 136 of a meta page) moves past them.
            let file = path + "/data.mdb"
            let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
            let handle = try #require(FileHandle(forUpdatingAtPath: file))
            defer { try? handle.close() }
            let size = try handle.seekToEnd()
            try handle.truncate(atOffset: size + UInt64(5 * pageSize))
            for meta in 0..<2 {
                let offset = UInt64(meta * pageSize + 136)
                try handle.seek(toOffset: offset)
                let bytes = try #require(try handle.read(upToCount: 8))
                let last = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
                try handle.seek(toOffset: offset)
                try handle.write(contentsOf: withUnsafeBytes(of: last + 5) { Data($0) })
            }
            try handle.synchronize()
            let store = try PersistentDefaults(path: path)
            let problems = try store.verify()
            #expect(problems.count == 1)
            #expect(problems.first?.contains("pages do not add up") == true, "\(problems)")
        }
    }
}
