import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// Writes with Python's `lmdb` package, a client that knows only the documented format (see
/// `OnDiskFormat.md`): in one transaction, each operation puts a value (hex) under a key (hex)
/// of a named database, or deletes the key when the value is nil. Returns the exit status.
private func writeWithPython(_ path: String, _ operations: [(database: String, key: String, value: String?)]) throws
    -> Int32
{
    let script = """
        import lmdb, sys
        env = lmdb.open(sys.argv[1], max_dbs=8)
        with env.begin(write=True) as tx:
            args = sys.argv[2:]
            for database, key, value in zip(args[0::3], args[1::3], args[2::3]):
                db = env.open_db(database.encode(), txn=tx, create=False)
                if value == "-":
                    tx.delete(bytes.fromhex(key), db=db)
                else:
                    tx.put(bytes.fromhex(key), bytes.fromhex(value), db=db)
        env.close()
        """
    return try runPython(script, [path] + operations.flatMap { [$0.database, $0.key, $0.value ?? "-"] })
}

private func hex(_ bytes: some Sequence<UInt8>) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

/// The log database's key of `sequence`: 8 bytes big-endian.
private func logKey(_ sequence: UInt64) -> String { withUnsafeBytes(of: sequence.bigEndian) { hex($0) } }

/// An `int` value: tag `0x02`, then 8 bytes big-endian.
private func intValue(_ value: Int64) -> String { "02" + withUnsafeBytes(of: value.bigEndian) { hex($0) } }

/// A commit record of record format 1 that sets `name` to `encodedValue` (hex), as
/// `OnDiskFormat.md` describes it.
private func logRecord(setting name: String, to encodedValue: String, version: UInt8 = 1) -> String {
    var bytes: [UInt8] = [version]
    withUnsafeBytes(of: Int64(1_700_000_000_000_000).bigEndian) { bytes += $0 }  // microseconds
    withUnsafeBytes(of: Int32(4242).bigEndian) { bytes += $0 }  // process ID
    withUnsafeBytes(of: UInt32(1).bigEndian) { bytes += $0 }  // one change
    withUnsafeBytes(of: UInt16(name.utf8.count).bigEndian) { bytes += $0 }
    bytes += Array(name.utf8) + [1]  // set
    withUnsafeBytes(of: UInt32(encodedValue.count / 2).bigEndian) { bytes += $0 }
    return hex(bytes) + encodedValue
}

/// Values, log records and whole copies made by clients other than this library — Python's
/// `lmdb` package and `mdb_dump`/`mdb_load` — from the documented on-disk format.
@Suite(
    "Values and log records another LMDB client writes",
    .enabled(if: pythonHasLMDB, "python3 cannot import lmdb (pip install lmdb); interoperability not tested"))
struct ForeignWriterTests {
    /// A `Codable` type whose JSON is a single `Date` (seconds since 2001 inside JSON).
    struct Deadline: Codable, Equatable {
        var date: Date
        init(date: Date) { self.date = date }
        init(from decoder: any Decoder) throws { date = try decoder.singleValueContainer().decode(Date.self) }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(date)
        }
    }

    private static func isDecodingFailure(_ body: () throws -> Void) -> Bool {
        do {
            try body()
            return false
        } catch PersistentDefaultsError.decodingFailed {
            return true
        } catch {
            return false
        }
    }

    @Test func edgePayloadsReadAsTheirValueOrFailToDecode() throws {
        typealias Key = PersistentDefaults.Key
        try withTemporaryStore { store, path, _ throws in
            func put(_ value: String) throws {
                #expect(try writeWithPython(path, [("values", hex("v".utf8), value)]) == 0)
            }
            func read<V: Codable & Sendable>(_ type: V.Type, default value: V) throws -> V {
                try store.value(for: Key<V>("v", default: value))
            }
            func fails<V: Codable & Sendable>(
                _ type: V.Type, default value: V, _ location: SourceLocation = #_sourceLocation
            ) {
                #expect(
                    Self.isDecodingFailure { _ = try store.value(for: Key<V>("v", default: value)) },
                    sourceLocation: location)
            }
            try put(intValue(.min))
            #expect(try read(Int.self, default: 0) == .min)
            fails(Int8.self, default: 0)
            fails(UInt64.self, default: 0)
            try put(intValue(.max))
            #expect(try read(Int64.self, default: 0) == .max)
            try put("03" + String(repeating: "ff", count: 8))
            #expect(try read(UInt64.self, default: 0) == .max)
            fails(Int.self, default: 0)
            try put("04" + "7ff8000000000000")  // NaN
            #expect(try read(Double.self, default: 0).isNaN)
            #expect(try read(Float.self, default: 0).isNaN)
            fails(Int.self, default: 0)
            try put("04" + "8000000000000000")  // -0.0
            #expect(try read(Double.self, default: 1).sign == .minus)
            #expect(try read(Double.self, default: 1) == 0)
            #expect(try read(Int.self, default: 1) == 0)
            try put("05")  // empty string
            #expect(try read(String.self, default: "x") == "")
            fails(URL.self, default: URL(string: "https://example.com")!)
            fails(UUID.self, default: UUID())
            try put("05fffe")  // invalid UTF-8
            fails(String.self, default: "x")
            fails([String].self, default: [])
            try put("06")  // empty data
            #expect(try read(Data.self, default: Data([1])) == Data())
            try put("")  // no tag at all
            fails(String.self, default: "x")
            fails(Int?.self, default: 1)
            fails([Int].self, default: [])
            try put("00")  // null
            #expect(try read(Int?.self, default: 1) == nil)
            fails(Int.self, default: 1)
            try put("0000")  // null with a payload
            fails(Int?.self, default: 1)
            try put("0102")  // bool 2
            fails(Bool.self, default: false)
            try put("01")  // bool without its byte
            fails(Bool.self, default: false)
            for wrongLength in ["02" + String(repeating: "00", count: 7), "02" + String(repeating: "00", count: 9)] {
                try put(wrongLength)
                fails(Int.self, default: 0)
                fails(Int?.self, default: 0)
            }
            try put("04" + String(repeating: "00", count: 4))
            fails(Double.self, default: 0)
            try put("0b" + String(repeating: "00", count: 7))
            fails(Date.self, default: .distantPast)
            try put("07" + String(repeating: "00", count: 9))
            fails(Date.self, default: .distantPast)
            try put("09" + String(repeating: "ab", count: 15))
            fails(UUID.self, default: UUID())
            try put("0c01")  // a tag no version has
            fails(Int.self, default: 0)
            fails([Int].self, default: [])
            try put("0a" + hex("[1,2]".utf8) + "ff")  // JSON with a byte that is not UTF-8
            fails([Int].self, default: [])
            try put("05" + hex("dark".utf8))  // a string for a JSON key of a Codable enum
            enum Mode: Codable, Equatable, Sendable { case light, dark }
            fails(Mode.self, default: .light)  // not a String-raw enum: its JSON is an object
        }
    }

    /// A primitive `date` that another client stores for a key whose type is JSON-coded reads
    /// as that date: inside JSON a `Date` is seconds since 2001, not the seconds since 1970 that
    /// `jsonText` shows.
    @Test(arguments: ["0b", "07"])
    func aDateAnotherClientStoresForAJSONKeyReadsAsThatDate(tag: String) throws {
        try withTemporaryStore { store, path, _ throws in
            let date = Date(timeIntervalSinceReferenceDate: 800_000_000.5)
            let seconds = tag == "0b" ? date.timeIntervalSinceReferenceDate : date.timeIntervalSince1970
            let payload = withUnsafeBytes(of: seconds.bitPattern.bigEndian) { hex($0) }
            #expect(try writeWithPython(path, [("values", hex("deadline".utf8), tag + payload)]) == 0)
            let plain = PersistentDefaults.Key<Date>("deadline", default: .distantPast)
            let wrapped = PersistentDefaults.Key<Deadline>("deadline", default: Deadline(date: .distantPast))
            #expect(try store.value(for: plain) == date)
            let read = try store.value(for: wrapped).date
            #expect(read == date, "read \(read.timeIntervalSince(date)) s off")
        }
    }

    /// A commit that another client makes and logs by the documented record format reaches
    /// observers with its sequence; a record with a wrong length or an unknown version byte is
    /// reported and its change still arrives, found by comparing the observed keys with the store.
    @Test(arguments: ["valid", "unknown version", "one byte short", "one byte long"])
    func aCommitAnotherClientLogsReachesObservers(record kind: String) throws {
        var options = PersistentDefaults.Options()
        options.fallbackCheckInterval = .milliseconds(20)
        try withTemporaryStore(options: options) { store, path, errors throws in
            let counter = PersistentDefaults.Key<Int>("counter", default: 0)
            let changes = Events<KeyChange<Int>>()
            let records = Events<CommitRecord>()
            let token = store.observe(counter) { changes.append($0) }
            let commits = store.observeCommits { records.append($0) }
            store[counter] = 1
            #expect(changes.wait(forCount: 1))
            let next = try store.lastSequence() + 1
            var record = logRecord(setting: "counter", to: intValue(2), version: kind == "unknown version" ? 2 : 1)
            if kind == "one byte short" { record.removeLast(2) }
            if kind == "one byte long" { record += "00" }
            let write = [("values", hex("counter".utf8), intValue(2)), ("log", logKey(next), record)]
            #expect(try writeWithPython(path, write.map { ($0.0, $0.1, Optional($0.2)) }) == 0)
            #expect(changes.wait(forCount: 2))
            #expect(changes.all.map(\.newValue) == [1, 2])
            #expect(changes.all.last?.oldValue == 1)
            if kind == "valid" {
                #expect(changes.all.last?.sequence == next)
                #expect(records.wait(forCount: 2))
                #expect(records.all.last?.processID == 4242)
                #expect(errors.all.isEmpty)
                #expect(try store.verify().isEmpty)
            } else {
                #expect(
                    eventually { errors.all.contains { "\($0)".contains("commit log record \(next) is malformed") } })
                #expect(try store.verify().contains { $0.contains("commit log record \(next) is malformed") })
            }
            store[counter] = 3
            #expect(changes.wait(forCount: 3))
            #expect(changes.all.last?.newValue == 3)
            #expect(try store.lastSequence() == next + 1)
            _ = (token, commits)
        }
    }

    /// Another client removes the newest log records (the log's last sequence goes back from 5
    /// to 2) and changes an observed key without logging it. The observers must keep getting
    /// this process's commits, which now reuse sequences 3…5, and the rewind must be reported.
    @Test func observersKeepGettingChangesAfterAnotherClientCutsTheLogBack() throws {
        var options = PersistentDefaults.Options()
        options.fallbackCheckInterval = .milliseconds(20)
        try withTemporaryStore(options: options) { store, path, errors throws in
            let counter = PersistentDefaults.Key<Int>("counter", default: 0)
            let marker = PersistentDefaults.Key<Int>("marker", default: 0)
            let changes = Events<KeyChange<Int>>()
            let markers = Events<KeyChange<Int>>()
            let tokens = [store.observe(counter) { changes.append($0) }, store.observe(marker) { markers.append($0) }]
            for value in 1...5 { store[counter] = value }
            #expect(changes.wait(forCount: 5))
            #expect(try store.lastSequence() == 5)
            let cut = [5, 4, 3].map { ("log", logKey(UInt64($0)), String?.none) }
            #expect(try writeWithPython(path, cut + [("values", hex("marker".utf8), intValue(1))]) == 0)
            // The marker's change shows that this process's watcher saw the other client's commit.
            #expect(markers.wait(forCount: 1))
            for value in 6...8 { store[counter] = value }
            #expect(changes.wait(forCount: 8, timeout: 5), "got \(changes.all.map(\.newValue))")
            #expect(changes.all.map(\.newValue) == Array(1...8))
            #expect(changes.all.map(\.oldValue) == Array(0...7))
            #expect(errors.all.contains { "\($0)".contains("went back") }, "\(errors.all)")
            _ = tokens
        }
    }

    /// After the last observer was cancelled, another client removes the newest log records;
    /// a new observer must register (not wait for a commit numbered past the old end) and get
    /// the next change.
    @Test func anObserverRegistersAfterAnotherClientCutsTheLogBack() throws {
        try withTemporaryStore { store, path, _ throws in
            let counter = PersistentDefaults.Key<Int>("counter", default: 0)
            let first = Events<KeyChange<Int>>()
            let token = store.observe(counter) { first.append($0) }
            for value in 1...5 { store[counter] = value }
            #expect(first.wait(forCount: 5))
            token.cancel()
            let cut = [5, 4, 3].map { ("log", logKey(UInt64($0)), String?.none) }
            #expect(try writeWithPython(path, cut) == 0)
            let changes = Events<KeyChange<Int>>()
            let registered = DispatchSemaphore(value: 0)
            let second = Guarded<ObservationToken?>(nil)
            Thread {
                second.withLock { $0 = store.observe(counter) { changes.append($0) } }
                registered.signal()
            }.start()
            #expect(registered.wait(timeout: .now() + 5) == .success, "observe() did not return")
            store[counter] = 6
            #expect(changes.wait(forCount: 1, timeout: 5))
            #expect(changes.all.first?.oldValue == 5)
            #expect(changes.all.first?.newValue == 6)
            _ = second
        }
    }

    /// `mdb_dump -a | mdb_load` into a new directory gives a store that opens, verifies and
    /// holds the same values, declarations and log.
    @Test func aStoreCopiedWithMdbDumpAndMdbLoadOpensAndVerifies() throws {
        try withTemporaryStore { store, path, _ throws in
            let counter = PersistentDefaults.Key<Int>("counter", default: 0)
            let name = PersistentDefaults.Key<String>("name", default: "")
            store[counter] = 7
            try store.set("snake", for: name)
            try store.declare(counter, summary: "a counter")
            try withTemporaryDirectory { copy throws in
                try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
                let pipe = try runProcess(
                    URL(fileURLWithPath: "/bin/sh"), ["-c", "mdb_dump -a \"$0\" | mdb_load \"$1\"", path, copy])
                #expect(pipe.status == 0, "\(pipe.output)")
                let copied = try PersistentDefaults(path: copy)
                #expect(try copied.verify().isEmpty)
                #expect(copied[counter] == 7)
                #expect(copied[name] == "snake")
                #expect(try copied.declarations() == store.declarations())
                #expect(try copied.commits(after: 0) == store.commits(after: 0))
                copied[counter] = 8
                #expect(try copied.lastSequence() == store.lastSequence() + 1)
                #expect(try copied.verify().isEmpty)
            }
        }
    }
}
