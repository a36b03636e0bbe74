import Foundation
import Synchronization

/// One committed write transaction, as the commit log keeps it.
///
/// ```swift
/// for record in try store.commits(after: lastHandled) {
///     print(record.sequence, record.changes.map(\.key))
/// }
/// ```
public struct CommitRecord: Sendable, Equatable {
    /// The commit's number: 1 for the first commit of a store, then one more each commit.
    public let sequence: UInt64
    /// When the commit was made (microsecond resolution).
    public let timestamp: Date
    /// The process that made it.
    public let processID: Int32
    /// Each key whose value changed, in the order first written.
    public var changes: [Change] {
        switch storage {
        case .decoded(let changes): changes
        case .encoded(let encoded): encoded.changes
        }
    }
    /// The changes, as values or as the bytes a write transaction logged for them.
    private let storage: Storage

    /// How a record holds its changes.
    private enum Storage: Sendable {
        case decoded([Change])
        /// As logged, decoded at the first use of ``changes``: a commit nobody observes then
        /// makes no array per changed value (one per change and its release cost a 1,000-key
        /// transaction ~20 % of its instructions, callgrind).
        case encoded(EncodedChanges)
    }

    /// One changed key.
    public struct Change: Sendable, Equatable {
        /// The key's name.
        public let key: String
        /// The new value's stored bytes (tag and payload), or nil when the key was removed.
        public let encodedValue: [UInt8]?

        /// Creates a change.
        public init(key: String, encodedValue: [UInt8]?) {
            self.key = key
            self.encodedValue = encodedValue
        }

        /// The new value, or nil when the key was removed.
        public func storedValue() throws(StoredValueError) -> StoredValue? {
            guard let encodedValue else { return nil }
            return try StoredValue(encodedValue: encodedValue)
        }

        /// Whether both changes have the same key name, compared by its UTF-8 bytes (a key name
        /// is its bytes: NFC "café" and NFD "cafe\u{301}" are different keys), and value.
        public static func == (lhs: Change, rhs: Change) -> Bool {
            lhs.key.utf8.elementsEqual(rhs.key.utf8) && lhs.encodedValue == rhs.encodedValue
        }
    }

    /// Creates a record.
    public init(sequence: UInt64, timestamp: Date, processID: Int32, changes: [Change]) {
        self.sequence = sequence
        self.timestamp = timestamp
        self.processID = processID
        storage = .decoded(changes)
    }

    /// Creates a record whose changes are `encoded`, the change section of its log format
    /// (count-prefixed by the caller: `count` changes, each as ``encode(into:)`` writes it).
    init(sequence: UInt64, timestamp: Date, processID: Int32, encoded: EncodedChanges) {
        self.sequence = sequence
        self.timestamp = timestamp
        self.processID = processID
        storage = .encoded(encoded)
    }

    /// Whether both records have the same sequence, time, process and changes.
    public static func == (lhs: CommitRecord, rhs: CommitRecord) -> Bool {
        lhs.sequence == rhs.sequence && lhs.timestamp == rhs.timestamp && lhs.processID == rhs.processID
            && lhs.changes == rhs.changes
    }

    /// Calls `body` with each changed key's name (its UTF-8 bytes) until it returns false,
    /// without decoding the changes.
    func forEachChangedName(_ body: (UnsafeRawBufferPointer) -> Bool) {
        switch storage {
        case .decoded(let changes):
            for change in changes {
                var name = change.key
                guard name.withUTF8({ body(UnsafeRawBufferPointer($0)) }) else { return }
            }
        case .encoded(let encoded):
            encoded.forEachName(body)
        }
    }

    /// The names of the changed keys.
    public var changedKeys: [String] { changes.map(\.key) }

    /// The format of a record's value in the log database.
    static let formatVersion: UInt8 = 1
    fileprivate static let setMark: UInt8 = 1
    fileprivate static let removeMark: UInt8 = 2

    /// The size of the record's value in the log database.
    var encodedCount: Int {
        let header = 17  // version, timestamp, process ID, change count
        switch storage {
        case .decoded(let changes):
            return changes.reduce(header) { size, change in
                size + Self.encodedChangeSize(nameCount: change.key.utf8.count, valueCount: change.encodedValue?.count)
            }
        case .encoded(let encoded):
            return header + encoded.byteCount
        }
    }

    /// The record's value in the log database (the sequence is its key).
    var encoded: [UInt8] {
        let count = encodedCount
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            encode(into: UnsafeMutableRawBufferPointer(buffer))
            initialized = count
        }
    }

    /// Writes the record's value into `buffer`, which holds exactly `encodedCount` bytes.
    func encode(into buffer: UnsafeMutableRawBufferPointer) {
        var writer = RawByteWriter(buffer)
        writer.append(Self.formatVersion)
        writer.append(UInt64(bitPattern: Int64((timestamp.timeIntervalSince1970 * 1_000_000).rounded())))
        writer.append(UInt32(bitPattern: processID))
        switch storage {
        case .decoded(let changes):
            writer.append(UInt32(changes.count))
            for change in changes {
                var name = change.key
                name.withUTF8 { name in
                    guard let value = change.encodedValue else {
                        return Self.appendChange(named: UnsafeRawBufferPointer(name), value: nil, to: &writer)
                    }
                    value.withUnsafeBytes {
                        Self.appendChange(named: UnsafeRawBufferPointer(name), value: $0, to: &writer)
                    }
                }
            }
        case .encoded(let encoded):
            writer.append(UInt32(encoded.count))
            encoded.withBytes { writer.append($0) }
        }
        precondition(writer.offset == buffer.count, "encodedCount and encode(into:) disagree")
    }

    /// Writes one change as the log format holds it: the name's length and bytes, then a set
    /// mark, the value's length and bytes, or a remove mark.
    @inline(__always)
    static func appendChange(
        named name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?, to writer: inout RawByteWriter
    ) {
        writer.appendChange(named: name, value: value)
    }

    /// Reads `count` changes from `reader`, as ``appendChange(named:value:to:)`` writes them,
    /// passing each name to `checkName` as soon as it is read (before its mark), then the name
    /// and value (nil: removed) to `body`, until `body` returns false.
    fileprivate static func readChanges(
        _ count: Int, from reader: inout ByteReader,
        checkName: (UnsafeRawBufferPointer) throws(StoredValueError) -> Void = { _ in },
        _ body: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer?) throws(StoredValueError) -> Bool
    ) throws(StoredValueError) {
        for _ in 0..<count {
            let name = try reader.bytes(Int(try reader.read(UInt16.self)))
            try checkName(name)
            let value: UnsafeRawBufferPointer?
            switch try reader.read(UInt8.self) {
            case setMark: value = try reader.bytes(Int(try reader.read(UInt32.self)))
            case removeMark: value = nil
            case let mark: throw StoredValueError("change mark \(mark) is unknown")
            }
            guard try body(name, value) else { return }
        }
    }

    /// Decodes `count` changes from `reader`, as ``appendChange(named:value:to:)`` writes them.
    fileprivate static func decodeChanges(_ count: Int, from reader: inout ByteReader) throws(StoredValueError)
        -> [Change]
    {
        var changes: [Change] = []
        changes.reserveCapacity(count)
        var key = ""
        func check(_ name: UnsafeRawBufferPointer) throws(StoredValueError) {
            guard let valid = String(validating: name, as: UTF8.self) else {
                throw StoredValueError("a key name is not valid UTF-8")
            }
            key = valid
        }
        func add(_: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer?) -> Bool {
            changes.append(Change(key: key, encodedValue: value.map { Array($0) }))
            return true
        }
        try readChanges(count, from: &reader, checkName: check, add)
        return changes
    }

    /// Decodes a log record; throws on any malformed byte instead of guessing.
    init(sequence: UInt64, bytes: UnsafeRawBufferPointer) throws(PersistentDefaultsError) {
        var reader = ByteReader(bytes)
        do throws(StoredValueError) {
            let version = try reader.read(UInt8.self)
            guard version == Self.formatVersion else { throw StoredValueError("record version \(version) is unknown") }
            let micros = Int64(bitPattern: try reader.read(UInt64.self))
            let pid = Int32(bitPattern: try reader.read(UInt32.self))
            let count = try reader.read(UInt32.self)
            // Each change takes at least 3 bytes; a larger count cannot be honest.
            guard Int(count) <= reader.remaining / 3 else {
                throw StoredValueError("change count \(count) exceeds the record")
            }
            let changes = try Self.decodeChanges(Int(count), from: &reader)
            guard reader.remaining == 0 else {
                throw StoredValueError("\(reader.remaining) bytes after the last change")
            }
            self.init(
                sequence: sequence, timestamp: Date(timeIntervalSince1970: Double(micros) / 1_000_000),
                processID: pid, changes: changes)
        } catch {
            throw .corruptLogRecord(sequence: sequence, reason: error.description)
        }
    }
}

/// The changes of a record a write transaction logged, as their log bytes: decoded once, when
/// somebody first asks for them.
///
/// `@unchecked Sendable`: `storage` is written only by the initializer, read afterwards and freed
/// by `deinit`; `decoded` is an atomic reference.
final class EncodedChanges: @unchecked Sendable {
    /// The changes one after the other, as ``CommitRecord/appendChange(named:value:to:)`` writes
    /// them, in memory of this object's own: not an array, whose `init(unsafeUninitializedCapacity:)`
    /// looks up the generic metadata of its storage class at run time (~530 instructions, 4 % of
    /// a bounded `set`, callgrind).
    private let storage: UnsafeMutableRawBufferPointer
    /// How many bytes of `storage` the changes fill.
    let byteCount: Int
    /// How many changes `bytes` holds.
    let count: Int
    /// The changes once decoded. An atomic reference, not a lock: a lock per record (a
    /// `pthread` mutex made and destroyed with each commit) cost a single `set` 2 %. Two threads
    /// that ask at once may both decode; one result is kept.
    private let decoded = AtomicLazyReference<DecodedChanges>()

    /// The decoded changes, as a reference `decoded` can hold.
    private final class DecodedChanges: Sendable {
        let changes: [CommitRecord.Change]
        init(_ changes: [CommitRecord.Change]) { self.changes = changes }
    }

    /// Changes that `write` appends to a writer of `capacity` bytes (at least what it writes),
    /// returning how many it appended.
    init(capacity: Int, _ write: (inout RawByteWriter) -> Int) {
        storage = UnsafeMutableRawBufferPointer.allocate(byteCount: max(capacity, 1), alignment: 1)
        var writer = RawByteWriter(storage)
        count = write(&writer)
        byteCount = writer.offset
    }

    deinit { storage.deallocate() }

    /// Calls `body` with the changes' bytes, valid only inside `body`.
    func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try withExtendedLifetime(self) { try body(UnsafeRawBufferPointer(rebasing: storage[..<byteCount])) }
    }

    /// The changes, decoded at the first call.
    var changes: [CommitRecord.Change] {
        if let done = decoded.load() { return done.changes }
        let changes = read { (reader) throws(StoredValueError) in try CommitRecord.decodeChanges(count, from: &reader) }
        return decoded.storeIfNil(DecodedChanges(changes)).changes
    }

    /// Calls `body` with each change's name until it returns false.
    func forEachName(_ body: (UnsafeRawBufferPointer) -> Bool) {
        read { (reader) throws(StoredValueError) in
            try CommitRecord.readChanges(count, from: &reader) { name, _ in body(name) }
        }
    }

    /// Runs `body` with a reader of `bytes`, which this process wrote with `appendChange` a
    /// moment ago: they always read, so a failure is a bug here, not bad input.
    private func read<R>(_ body: (inout ByteReader) throws(StoredValueError) -> R) -> R {
        let result = withBytes { buffer in
            Result { () throws(StoredValueError) in
                var reader = ByteReader(buffer)
                return try body(&reader)
            }
        }
        guard case .success(let value) = result else {
            preconditionFailure("a commit record's own changes do not decode: \(result)")
        }
        return value
    }
}

extension CommitRecord {
    /// The bytes ``appendChange(named:value:to:)`` writes for a name and value of these sizes.
    static func encodedChangeSize(nameCount: Int, valueCount: Int?) -> Int {
        3 + nameCount + (valueCount.map { 4 + $0 } ?? 0)
    }
}

/// Appends big-endian integers and bytes.
struct ByteWriter {
    var bytes: [UInt8] = []

    mutating func append<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func append(contentsOf other: some Collection<UInt8>) { bytes.append(contentsOf: other) }
}

/// Writes big-endian integers and bytes into a buffer of known size (LMDB's reserved space, or a
/// commit's `EncodedChanges`).
struct RawByteWriter {
    private let buffer: UnsafeMutableRawBufferPointer
    private(set) var offset = 0

    init(_ buffer: UnsafeMutableRawBufferPointer) { self.buffer = buffer }

    mutating func append<T: FixedWidthInteger>(_ value: T) {
        let size = MemoryLayout<T>.size
        precondition(offset + size <= buffer.count, "write past the reserved space")
        buffer.storeBytes(of: value.bigEndian, toByteOffset: offset, as: T.self)
        offset += size
    }

    /// Appends the bytes of `source`.
    @inline(__always)
    mutating func append(_ source: UnsafeRawBufferPointer) {
        precondition(source.count <= buffer.count - offset, "write past the reserved space")
        if let base = source.baseAddress { (buffer.baseAddress! + offset).copySmall(from: base, count: source.count) }
        offset += source.count
    }

    /// Appends one change as ``CommitRecord/appendChange(named:value:to:)`` describes it, with
    /// one bounds check for the whole change, and names and values of up to 16 bytes copied with
    /// two loads and stores each instead of a `memcpy` call. Not inlined: inlined into
    /// `WriteTransaction.finish()`'s loop, the compiler retained and released each touched key
    /// twice around it.
    @inline(never)
    mutating func appendChange(named name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?) {
        let size = CommitRecord.encodedChangeSize(nameCount: name.count, valueCount: value?.count)
        precondition(size <= buffer.count - offset, "write past the reserved space")
        let start = buffer.baseAddress! + offset
        start.storeBytes(of: UInt16(name.count).bigEndian, as: UInt16.self)
        Self.copy(name, to: start + 2)
        let mark = start + 2 + name.count
        if let value {
            mark.storeBytes(of: CommitRecord.setMark, as: UInt8.self)
            (mark + 1).storeBytes(of: UInt32(value.count).bigEndian, as: UInt32.self)
            Self.copy(value, to: mark + 5)
        } else {
            mark.storeBytes(of: CommitRecord.removeMark, as: UInt8.self)
        }
        offset += size
    }

    /// Copies `source` to `target` (`UnsafeMutableRawPointer.copySmall(from:count:)`).
    @inline(__always)
    private static func copy(_ source: UnsafeRawBufferPointer, to target: UnsafeMutableRawPointer) {
        guard let base = source.baseAddress else { return }
        target.copySmall(from: base, count: source.count)
    }
}

/// Reads big-endian integers and bytes, throwing past the end.
struct ByteReader {
    private let buffer: UnsafeRawBufferPointer
    private var offset = 0

    init(_ buffer: UnsafeRawBufferPointer) { self.buffer = buffer }

    var remaining: Int { buffer.count - offset }

    mutating func bytes(_ count: Int) throws(StoredValueError) -> UnsafeRawBufferPointer {
        guard count <= remaining else { throw StoredValueError("record ends \(count - remaining) bytes early") }
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: buffer[offset..<offset + count])
    }

    mutating func read<T: FixedWidthInteger & UnsignedInteger>(_: T.Type) throws(StoredValueError) -> T {
        T(bigEndianBytes: try bytes(MemoryLayout<T>.size))
    }
}

/// A sequence number as the log database's key: 8 bytes big-endian, so keys sort by number.
func sequenceKey(_ sequence: UInt64) -> [UInt8] {
    var writer = ByteWriter()
    writer.append(sequence)
    return writer.bytes
}

/// The sequence numbers a log may hold: 1 for a store's first commit, at most `Int64.max`, so
/// that every sequence read from disk converts to `Int` and the next one (`+ 1`) cannot overflow.
let validSequences: ClosedRange<UInt64> = 1...UInt64(Int64.max)

/// Reads a log database key: 8 bytes big-endian, a number in ``validSequences``. Anything else
/// was written by another tool and throws ``PersistentDefaultsError/corruptLogRecord(sequence:reason:)``
/// (sequence 0 for a key that is not 8 bytes), never traps.
func logSequence(fromKey key: UnsafeRawBufferPointer) throws(PersistentDefaultsError) -> UInt64 {
    // Only for the messages: formatting costs more than a whole valid read.
    var hex: String {
        key.prefix(16).map { String($0 >> 4, radix: 16) + String($0 & 0xF, radix: 16) }.joined(separator: " ")
    }
    guard key.count == 8 else {
        throw .corruptLogRecord(
            sequence: 0, reason: "a log key is \(key.count) bytes (\(hex)\(key.count > 16 ? " …" : "")), not 8")
    }
    let sequence = UInt64(bigEndianBytes: key)
    guard validSequences.contains(sequence) else {
        throw .corruptLogRecord(
            sequence: sequence,
            reason: "log key \(hex) is not a sequence number \(validSequences.lowerBound)…\(validSequences.upperBound)")
    }
    return sequence
}
