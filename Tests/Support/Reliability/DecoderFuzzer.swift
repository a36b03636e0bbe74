import Foundation
import PersistentDefaults

/// What a decoder fuzz run did.
public struct FuzzFigures: Sendable, Equatable, CustomStringConvertible {
    /// Inputs fed to a decoder in all.
    public var inputs = 0
    /// Value inputs (`StoredValue(encodedValue:)`) that decoded.
    public var valuesDecoded = 0
    /// Value inputs refused with an error.
    public var valuesRefused = 0
    /// Record inputs (`CommitRecord.decode`) that decoded.
    public var recordsDecoded = 0
    /// Record inputs refused with an error.
    public var recordsRefused = 0
    /// Problems found: a valid encoding refused, or a decoded value whose own bytes do not decode.
    public var problems: [String] = []

    /// One line per figure.
    public var description: String {
        """
        inputs fuzzed        \(inputs)
        values  decoded \(valuesDecoded), refused \(valuesRefused)
        records decoded \(recordsDecoded), refused \(recordsRefused)
        problems             \(problems.count)
        """
    }
}

/// Feeds random and mutated byte strings to the value and commit-record decoders. A crash
/// (trap, overflow, out-of-bounds read) ends the process, which is the failure a fuzz run
/// looks for; everything else is counted.
public enum DecoderFuzzer {
    /// Runs `inputs` inputs from `seed`: a third random bytes, the rest mutations of valid
    /// value and record encodings. Decoded values are also printed (`description`, `jsonText`)
    /// and re-encoded, as `pdinspect` would.
    public static func run(seed: UInt64, inputs: Int) -> FuzzFigures {
        var random = SplitMix64(seed: seed)
        var figures = FuzzFigures()
        let values = sampleValues()
        let records = sampleRecords(values)
        for (index, record) in records.enumerated() {
            if (try? CommitRecord.decode(sequence: UInt64(index), encodedRecord: record)) == nil {
                figures.problems.append("valid record sample \(index) is refused")
            }
        }
        for _ in 0..<inputs {
            let input: [UInt8]
            let asRecord: Bool
            switch Int.random(in: 0..<6, using: &random) {
            case 0, 1:
                input = (0..<Int.random(in: 0...48, using: &random)).map { _ in
                    UInt8.random(in: 0...255, using: &random)
                }
                asRecord = Bool.random(using: &random)
            case 2, 3:
                input = mutate(values.randomElement(using: &random)!, using: &random)
                asRecord = false
            default:
                input = mutate(records.randomElement(using: &random)!, using: &random)
                asRecord = true
            }
            figures.inputs += 1
            if asRecord {
                feedRecord(input, to: &figures)
            } else {
                feedValue(input, to: &figures)
            }
        }
        return figures
    }

    private static func feedValue(_ input: [UInt8], to figures: inout FuzzFigures) {
        do {
            let value = try StoredValue(encodedValue: input)
            figures.valuesDecoded += 1
            exercise(value, input: input, figures: &figures)
        } catch {
            figures.valuesRefused += 1
        }
    }

    private static func feedRecord(_ input: [UInt8], to figures: inout FuzzFigures) {
        do {
            let record = try CommitRecord.decode(sequence: 1, encodedRecord: input)
            figures.recordsDecoded += 1
            for change in record.changes {
                if let value = try? change.storedValue() { exercise(value, input: input, figures: &figures) }
            }
        } catch {
            figures.recordsRefused += 1
        }
    }

    private static func exercise(_ value: StoredValue, input: [UInt8], figures: inout FuzzFigures) {
        _ = value.description
        _ = value.jsonText
        if (try? StoredValue(encodedValue: value.encodedValue)) == nil, figures.problems.count < 20 {
            figures.problems.append("the re-encoding of a decoded \(value.tag) does not decode: \(input)")
        }
    }

    /// Applies one to four mutations: bit flips, interesting bytes, truncation, extension,
    /// insertion, deletion.
    static func mutate(_ original: [UInt8], using random: inout SplitMix64) -> [UInt8] {
        var bytes = original
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            let position = bytes.isEmpty ? 0 : Int.random(in: 0..<bytes.count, using: &random)
            switch Int.random(in: 0..<7, using: &random) {
            case 0 where !bytes.isEmpty: bytes[position] ^= 1 << UInt8.random(in: 0...7, using: &random)
            case 1 where !bytes.isEmpty:
                bytes[position] = [0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF].randomElement(using: &random)!
            case 2: bytes.removeLast(min(bytes.count, Int.random(in: 1...8, using: &random)))
            case 3:
                bytes += (0..<Int.random(in: 1...8, using: &random)).map { _ in
                    UInt8.random(in: 0...255, using: &random)
                }
            case 4: bytes.insert(UInt8.random(in: 0...255, using: &random), at: position)
            case 5 where !bytes.isEmpty: bytes.remove(at: position)
            default: if !bytes.isEmpty { bytes[position] = UInt8.random(in: 0...255, using: &random) }
            }
        }
        return bytes
    }

    /// One valid encoding of each kind of value, with edge cases.
    static func sampleValues() -> [[UInt8]] {
        let samples: [StoredValue] = [
            .null, .bool(true), .bool(false), .int(0), .int(-1), .int(.max), .int(.min), .uint(.max),
            .double(0.5), .double(.nan), .double(-.infinity), .double(.greatestFiniteMagnitude),
            .string(""), .string("théme ✓"), .data(Data([0, 1, 2, 255])),
            .date(Date(timeIntervalSince1970: 1_796_029_200)), .date(Date(timeIntervalSince1970: -1e12)),
            .url(URL(string: "https://example.com/a?b=c#d")!),
            .uuid(UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16))),
            .json(#"{"title":"Main","x":10,"y":[1,2.5,null,true]}"#), .json("[]"),
        ]
        return samples.map(\.encodedValue)
    }

    /// Valid commit records in record format 1, written from the format article's description of it (OnDiskFormat.md)
    /// (not with the library's encoder), so that the fuzzer also checks the documented format.
    static func sampleRecords(_ values: [[UInt8]]) -> [[UInt8]] {
        func record(_ changes: [(String, [UInt8]?)], micros: Int64 = 1_796_029_200_000_000, pid: Int32 = 4242)
            -> [UInt8]
        {
            var bytes: [UInt8] = [1]
            bytes += bigEndian(UInt64(bitPattern: micros), width: 8)
            bytes += bigEndian(UInt64(UInt32(bitPattern: pid)), width: 4)
            bytes += bigEndian(UInt64(changes.count), width: 4)
            for (name, value) in changes {
                bytes += bigEndian(UInt64(name.utf8.count), width: 2) + Array(name.utf8)
                if let value {
                    bytes += [1] + bigEndian(UInt64(value.count), width: 4) + value
                } else {
                    bytes.append(2)
                }
            }
            return bytes
        }
        return [
            record([]),
            record([("launchCount", values[3])]),
            record([("a", values[1]), ("b", nil), ("window.frame", values.last!)]),
            record(values.enumerated().map { ("key\($0.offset)", $0.element) }, micros: .max, pid: -1),
            record([("", nil)], micros: .min, pid: .max),
        ]
    }

    private static func bigEndian(_ value: UInt64, width: Int) -> [UInt8] {
        (0..<width).map { UInt8(truncatingIfNeeded: value >> (8 * UInt64(width - 1 - $0))) }
    }
}
