import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

/// A write transaction encodes values straight into its `ByteBuffer` (`StoredValue.append(to:)`)
/// and logs its changes in their log form, which its record decodes at the first use
/// (`EncodedChanges`).
@Suite struct LoggedChangesTests {
    static let values: [StoredValue] = [
        .null, .bool(true), .bool(false), .int(0), .int(-1), .int(.max), .int(.min), .uint(.max),
        .double(-0.0), .double(.infinity), .double(1.5), .string(""), .string("café"),
        .string(String(repeating: "x", count: 700)), .data(Data([0, 1, 255])), .data(Data()),
        .date(Date(timeIntervalSinceReferenceDate: -3.25)), .url(URL(string: "https://example.com/a?b=c")!),
        .uuid(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!), .json(#"{"a":[1,2]}"#),
    ]

    /// The bytes must be exactly those of `encodedValue`, which everything else stores and compares.
    @Test func appendingAValueGivesItsEncodedBytes() {
        // A small buffer, so that appending grows it several times.
        var buffer = ByteBuffer(capacity: 16)
        var ranges: [Range<Int>] = []
        for value in Self.values {
            let start = buffer.count
            value.append(to: &buffer)
            ranges.append(start..<buffer.count)
        }
        for (value, range) in zip(Self.values, ranges) {
            #expect(Array(buffer.bytes(range)) == value.encodedValue, "\(value)")
        }
    }

    @Test func truncatingDropsOnlyTheLastBytes() {
        var buffer = ByteBuffer(capacity: 16)
        buffer.append(contentsOf: Array(0..<40 as Range<UInt8>))
        buffer.append(bigEndian: UInt32(0x0102_0304))
        #expect(Array(buffer.bytes(40..<44)) == [1, 2, 3, 4])
        buffer.truncate(to: 10)
        #expect(buffer.count == 10)
        buffer.append(7)
        #expect(Array(buffer.bytes(0..<11)) == Array(0..<10 as Range<UInt8>) + [7])
        #expect(buffer.byte(at: 10) == 7)
    }

    /// A record of this process decodes its changes at the first use, under its own lock: many
    /// threads asking at once (more than cores) all get the same changes, those the log holds.
    @Test func aRecordsChangesDecodeOnceWhateverThreadsAskFirst() throws {
        try withTemporaryStore { store, _, log throws in
            for round in 0..<20 {
                let (_, committed) = try store.core.commit { tx in
                    for index in 0..<30 {
                        tx[PersistentDefaults.Key<Int>("k\(index)", default: 0)] = round * 100 + index
                    }
                }
                let record = try #require(committed)
                let seen = Guarded<[[CommitRecord.Change]]>([])
                DispatchQueue.concurrentPerform(iterations: 8) { _ in
                    let changes = record.changes
                    seen.withLock { $0.append(changes) }
                }
                let all = seen.withLock { $0 }
                #expect(all.count == 8)
                #expect(all.allSatisfy { $0.count == 30 && $0 == all[0] })
                #expect(try store.commits(after: record.sequence - 1).first == record)
            }
            #expect(log.all.isEmpty)
        }
    }

    /// Transactions that log a record without a value change (key declarations), on several
    /// threads of several stores at once. `[UInt8](unsafeUninitializedCapacity: 0)` stores the
    /// count 0 into the Swift runtime's shared empty array (`_swiftEmptyArrayStorage`): a data
    /// race that ThreadSanitizer reported between two such commits in 1 full `tools/tsan` run
    /// of 2 (a 10-line program with 4 threads reports it at once). The record's section is now
    /// made without that initializer when it is empty. For `tools/tsan`; the assertions check
    /// the records.
    @Test func declarationCommitsOnManyThreadsLogRecordsWithoutChanges() throws {
        let threads = max(ProcessInfo.processInfo.activeProcessorCount * 2, 4)
        let failures = Guarded<[String]>([])
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            do {
                try withTemporaryDirectory { path in
                    let store = try boundedStore(at: path)
                    for round in 0..<50 {
                        try store.declare(PersistentDefaults.Key<Int>("k\(round % 5)", default: round))
                    }
                    let records = try store.commits(after: 0)
                    if records.count != 50 || records.contains(where: { !$0.changes.isEmpty }) {
                        failures.withLock { $0.append("thread \(thread): \(records.map(\.changes.count))") }
                    }
                }
            } catch {
                failures.withLock { $0.append("thread \(thread): \(error)") }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty)
    }
}
