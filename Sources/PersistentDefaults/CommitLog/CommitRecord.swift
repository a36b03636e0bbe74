import Foundation

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
    public let changes: [Change]

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
        self.changes = changes
    }

    /// The names of the changed keys.
    public var changedKeys: [String] { changes.map(\.key) }

    /// The format of a record's value in the log database.
    static let formatVersion: UInt8 = 1
    private static let setMark: UInt8 = 1
    private static let removeMark: UInt8 = 2

    /// The size of the record's value in the log database.
    var encodedCount: Int {
        var size = 17  // version, timestamp, process ID, change count
        for change in changes {
            size += 3 + change.key.utf8.count + (change.encodedValue.map { 4 + $0.count } ?? 0)
        }
        return size
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
        writer.append(UInt32(changes.count))
        for change in changes {
            writer.append(UInt16(change.key.utf8.count))
            writer.append(contentsOf: change.key.utf8)
            if let value = change.encodedValue {
                writer.append(Self.setMark)
                writer.append(UInt32(value.count))
                writer.append(contentsOf: value)
            } else {
                writer.append(Self.removeMark)
            }
        }
        precondition(writer.offset == buffer.count, "encodedCount and encode(into:) disagree")
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
            var changes: [Change] = []
            changes.reserveCapacity(Int(count))
            for _ in 0..<count {
                let nameLength = try reader.read(UInt16.self)
                guard let name = String(validating: try reader.bytes(Int(nameLength)), as: UTF8.self) else {
                    throw StoredValueError("a key name is not valid UTF-8")
                }
                switch try reader.read(UInt8.self) {
                case Self.setMark:
                    let length = try reader.read(UInt32.self)
                    changes.append(Change(key: name, encodedValue: Array(try reader.bytes(Int(length)))))
                case Self.removeMark:
                    changes.append(Change(key: name, encodedValue: nil))
                case let mark:
                    throw StoredValueError("change mark \(mark) is unknown")
                }
            }
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

/// Appends big-endian integers and bytes.
struct ByteWriter {
    var bytes: [UInt8] = []

    mutating func append<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func append(contentsOf other: some Collection<UInt8>) { bytes.append(contentsOf: other) }
}

/// Writes big-endian integers and bytes into a buffer of known size (LMDB's reserved space).
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

    mutating func append(contentsOf bytes: some Collection<UInt8>) {
        if bytes.withContiguousStorageIfAvailable({ append(UnsafeRawBufferPointer($0)) }) != nil { return }
        for byte in bytes {
            precondition(offset < buffer.count, "write past the reserved space")
            buffer[offset] = byte
            offset += 1
        }
    }

    /// Appends an array's bytes: one copy, without the generic path's closure.
    mutating func append(contentsOf bytes: [UInt8]) {
        bytes.withUnsafeBytes { append($0) }
    }

    /// Appends the bytes of `source`.
    @inline(__always)
    mutating func append(_ source: UnsafeRawBufferPointer) {
        precondition(source.count <= buffer.count - offset, "write past the reserved space")
        if let base = source.baseAddress {
            (buffer.baseAddress! + offset).copyMemory(from: base, byteCount: source.count)
        }
        offset += source.count
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
