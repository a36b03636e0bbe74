import Foundation

/// The pieces of the power-loss test that the writer, the driver and the tests share: timed
/// acknowledgement lines and the line the simulated disk (`tools/power-cut-disk/pcdisk.c`)
/// prints when it cuts the power.
///
/// ```swift
/// let line = PowerCut.acknowledgement(number: 7, entries: [.init(index: 3, length: 10)], time: 42)
/// let ack = PowerCut.parseAcknowledgement(line[...])  // (7, [3:10], 42)
/// ```
public enum PowerCut {
    /// Nanoseconds on `CLOCK_MONOTONIC`, the clock the simulated disk stamps its cut with;
    /// it is the same in every process of the machine.
    public static func monotonicNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// The line a power-cut writer prints for a commit that returned:
    /// `ack <number> <entry>,<entry>… <monotonic ns>`.
    public static func acknowledgement(number: UInt64, entries: [CrashPayload.Entry], time: UInt64) -> String {
        CrashWriter.acknowledgement(number: number, entries: entries) + " \(time)"
    }

    /// Parses a timed acknowledgement line; nil for anything else.
    public static func parseAcknowledgement(
        _ line: Substring
    ) -> (number: UInt64, entries: [CrashPayload.Entry], time: UInt64)? {
        guard let space = line.lastIndex(of: " "), let time = UInt64(line[line.index(after: space)...]),
            let ack = CrashWriter.parseAcknowledgement(line[..<space])
        else { return nil }
        return (ack.number, ack.entries, time)
    }
}

/// What the simulated disk did at a power cut, parsed from its `pcdisk: cut …` line.
public struct PowerCutReport: Sendable, Equatable {
    /// When the power was cut (`CLOCK_MONOTONIC`, ns).
    public var time: UInt64
    /// When the last durable point (`fdatasync`, `fsync`) began, or 0 if the writer never reached
    /// one: every write that returned before it was on the disk.
    public var synced: UInt64
    /// Writes to `data.mdb` since the last durable point.
    public var writes: Int
    /// 512-byte sectors those writes touched.
    public var sectors: Int
    /// Sectors that kept their newest version.
    public var latest: Int
    /// Sectors that kept a version older than their newest (a reordering).
    public var older: Int
    /// Sectors that went back to their durable content.
    public var reverted: Int
    /// Kept writes that were torn (some of their sectors lost).
    public var torn: Int
    /// The file's size before the cut.
    public var sizeBefore: Int
    /// The file's size after the cut.
    public var sizeAfter: Int
    /// Whether a meta page (LMDB's first two pages) kept a version newer than its durable one.
    public var metaAhead: Bool
    /// The probability with which each unsynced write was kept at this cut.
    public var keepProbability: Double

    /// Parses `pcdisk: cut t=… synced=… …`; nil for any other line.
    public init?(line: Substring) {
        guard line.hasPrefix("pcdisk: cut ") else { return nil }
        var fields: [Substring: Substring] = [:]
        for word in line.dropFirst("pcdisk: cut ".count).split(separator: " ") {
            guard let equals = word.firstIndex(of: "=") else { return nil }
            fields[word[..<equals]] = word[word.index(after: equals)...]
        }
        let sizes = fields["size"]?.split(separator: "-").map { $0.trimmingPrefix(">") }
        guard let time = fields["t"].flatMap({ UInt64($0) }), let synced = fields["synced"].flatMap({ UInt64($0) }),
            let writes = fields["writes"].flatMap({ Int($0) }), let sectors = fields["sectors"].flatMap({ Int($0) }),
            let latest = fields["latest"].flatMap({ Int($0) }), let older = fields["older"].flatMap({ Int($0) }),
            let reverted = fields["reverted"].flatMap({ Int($0) }), let torn = fields["torn"].flatMap({ Int($0) }),
            let sizes, sizes.count == 2, let sizeBefore = Int(sizes[0]), let sizeAfter = Int(sizes[1]),
            let meta = fields["meta"], meta == "ahead" || meta == "durable",
            let keepProbability = fields["p"].flatMap({ Double($0) })
        else { return nil }
        self.time = time
        self.synced = synced
        self.writes = writes
        self.sectors = sectors
        self.latest = latest
        self.older = older
        self.reverted = reverted
        self.torn = torn
        self.sizeBefore = sizeBefore
        self.sizeAfter = sizeAfter
        self.metaAhead = meta == "ahead"
        self.keepProbability = keepProbability
    }

    /// Whether the cut broke the order in which the writes were issued: some sector holds an
    /// older version than its newest, or went back to its durable content while another
    /// sector kept a newer version, or the file lost size that kept data needed.
    public var reordered: Bool { older > 0 || (latest > 0 && reverted > 0) || torn > 0 }
}
