import Foundation

/// The data the crash test writes, laid out so that a torn or half-written transaction shows.
///
/// Transaction number `n` (which must equal the commit's sequence number) changes a few of the
/// keys `crash.k0` … `crash.k15` and always the manifest key `crash.txn`. Every value it sets
/// starts with `n` (8 bytes big-endian) followed by a payload whose every byte is derived from
/// `n` and its position; the manifest lists `n` and each key index with "set" or "removed". After
/// any crash, the newest manifest's keys must all carry its number, and every value's payload
/// must match its number byte for byte.
public enum CrashPayload {
    /// How many data keys the crash test uses.
    public static let keyCount = 16
    /// The manifest key's name.
    public static let manifestName = "crash.txn"

    /// The name of data key `index`.
    public static func keyName(_ index: Int) -> String { "crash.k\(index)" }

    /// Every key name the crash test writes: the data keys, then the manifest.
    public static let allNames: [String] = (0..<keyCount).map(keyName) + [manifestName]

    /// One key change of a transaction: which key, and the payload length or nil for a removal.
    public struct Entry: Sendable, Equatable, CustomStringConvertible {
        /// The data key's index, `0..<keyCount`.
        public var index: Int
        /// The payload length of the value set, or nil when the key was removed.
        public var length: Int?

        /// Creates an entry.
        public init(index: Int, length: Int?) {
            self.index = index
            self.length = length
        }

        /// `index:length` or `index:-` for a removal, as acknowledgement lines carry it.
        public var description: String { "\(index):\(length.map(String.init) ?? "-")" }

        /// Parses `description`.
        public init?(_ text: Substring) {
            let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 2, let index = Int(parts[0]), (0..<CrashPayload.keyCount).contains(index) else {
                return nil
            }
            if parts[1] == "-" {
                self.init(index: index, length: nil)
            } else if let length = Int(parts[1]), length >= 0 {
                self.init(index: index, length: length)
            } else {
                return nil
            }
        }
    }

    /// The value transaction `number` stores in a data key: the number, then `length` bytes.
    public static func value(number: UInt64, length: Int) -> Data {
        var bytes = bigEndian(number)
        bytes.reserveCapacity(8 + length)
        for position in 0..<length { bytes.append(patternByte(number: number, position: position)) }
        return Data(bytes)
    }

    /// The transaction number of a data key's value and its payload length; nil when the bytes
    /// are not exactly what `value(number:length:)` writes.
    public static func decodeValue(_ bytes: [UInt8]) -> (number: UInt64, length: Int)? {
        guard bytes.count >= 8 else { return nil }
        let number = UInt64(bigEndianBytes: bytes[0..<8])
        for position in 0..<(bytes.count - 8)
        where bytes[8 + position] != patternByte(number: number, position: position) {
            return nil
        }
        return (number, bytes.count - 8)
    }

    /// The manifest of transaction `number`: the number, then per entry its index and length.
    public static func manifest(number: UInt64, entries: [Entry]) -> Data {
        var bytes = bigEndian(number)
        for entry in entries {
            bytes.append(UInt8(entry.index))
            bytes.append(contentsOf: bigEndian(UInt64(bitPattern: Int64(entry.length ?? -1))))
        }
        return Data(bytes)
    }

    /// Reads a manifest; nil when malformed.
    public static func decodeManifest(_ bytes: [UInt8]) -> (number: UInt64, entries: [Entry])? {
        guard bytes.count >= 8, (bytes.count - 8) % 9 == 0 else { return nil }
        let number = UInt64(bigEndianBytes: bytes[0..<8])
        var entries: [Entry] = []
        var offset = 8
        while offset < bytes.count {
            let index = Int(bytes[offset])
            let raw = Int64(bitPattern: UInt64(bigEndianBytes: bytes[(offset + 1)..<(offset + 9)]))
            guard index < keyCount, raw >= -1 else { return nil }
            entries.append(Entry(index: index, length: raw == -1 ? nil : Int(raw)))
            offset += 9
        }
        return (number, entries)
    }

    /// Picks the entries of one random transaction: one to four distinct keys, mostly small
    /// values, sometimes one of several kilobytes (an overflow page), sometimes a removal.
    public static func randomEntries(using random: inout SplitMix64) -> [Entry] {
        let count = Int.random(in: 1...4, using: &random)
        var indices = Array(0..<keyCount)
        indices.shuffle(using: &random)
        return indices.prefix(count).map { index in
            switch Int.random(in: 0..<32, using: &random) {
            case 0...2: Entry(index: index, length: nil)
            case 3: Entry(index: index, length: Int.random(in: 4_000...20_000, using: &random))
            default: Entry(index: index, length: Int.random(in: 0...64, using: &random))
            }
        }
    }

    private static func bigEndian(_ value: UInt64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) }
    }

    private static func patternByte(number: UInt64, position: Int) -> UInt8 {
        UInt8(truncatingIfNeeded: number &* 0x9E37_79B9 &+ UInt64(position) &* 31 &+ UInt64(position >> 8))
    }
}
