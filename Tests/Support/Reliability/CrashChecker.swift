import Foundation
import PersistentDefaults
import Synchronization

/// What one killed writer reported before it died.
public struct WriterReport: Sendable {
    /// The writer's process ID, as its commit records carry it.
    public var processID: Int32
    /// Each commit that returned in the writer, in order: its number and entries.
    public var acknowledged: [(number: UInt64, entries: [CrashPayload.Entry])]

    /// Creates a report.
    public init(processID: Int32, acknowledged: [(number: UInt64, entries: [CrashPayload.Entry])]) {
        self.processID = processID
        self.acknowledged = acknowledged
    }
}

/// The parent side of the crash test: after writers were killed, opens the store and checks
/// every invariant, carrying what it learnt from one round to the next.
public struct CrashChecker {
    /// The newest commit already checked.
    public private(set) var lastChecked: UInt64 = 0
    /// Acknowledged commits whose record and values were checked.
    public private(set) var acknowledgedChecked = 0
    /// Commits checked in all (acknowledged or not).
    public private(set) var commitsChecked = 0
    /// Commits that were in the store although their writer was killed before acknowledging
    /// them (at most one per killed writer is allowed).
    public private(set) var unacknowledgedCommits = 0
    /// Acknowledged commits that a check found missing although `mustSurvive` allowed their
    /// loss (a `.bounded` store after a power cut), in all checks so far.
    public private(set) var acknowledgedLost = 0
    /// The numbers of the acknowledged commits the last check found missing with leave.
    public private(set) var lastLost: [UInt64] = []
    /// The data expected in the store: each key's value bytes, from replaying the checked log.
    private var expected: [String: [UInt8]] = [:]

    /// A checker for a store that the crash writers start from empty.
    public init() {}

    /// Opens the store at `path` and checks it against the writers' reports and the log.
    /// Returns one line per problem; an empty array means every invariant held.
    ///
    /// An acknowledged commit missing from the store is a problem when `mustSurvive` returns
    /// true for its number (always, unless given), and is otherwise counted in `lastLost` and
    /// `acknowledgedLost`.
    public mutating func check(
        path: String, writers: [WriterReport], mustSurvive: (UInt64) -> Bool = { _ in true }
    ) -> [String] {
        var problems: [String] = []
        lastLost = []
        let errors = ErrorList()
        var options = PersistentDefaults.Options()
        options.errorHandler = { errors.append("\($0)") }
        do {
            let store = try PersistentDefaults(path: path, options: options)
            problems += try store.verify().map { "verify: \($0)" }
            problems += Self.checkModes(path: path)
            let (records, values) = try store.read { snapshot in
                let records = try snapshot.commits(after: lastChecked)
                let values = try CrashPayload.allNames.map { name -> [UInt8]? in
                    switch try snapshot.storedValue(named: name) {
                    case nil: return nil
                    case .data(let data)?: return Array(data)
                    case let other?: throw CrashCheckFailure("\(name) holds \(other.tag), not data")
                    }
                }
                return (records, values)
            }
            problems += checkRecords(records, writers: writers, mustSurvive: mustSurvive)
            problems += checkValues(values)
        } catch {
            problems.append("the store does not open or read: \(error)")
        }
        problems += errors.all.map { "error handler: \($0)" }
        return problems
    }

    private mutating func checkRecords(
        _ records: [CommitRecord], writers: [WriterReport], mustSurvive: (UInt64) -> Bool
    ) -> [String] {
        var problems: [String] = []
        if let first = records.first, first.sequence != lastChecked + 1 {
            problems.append("the log starts at #\(first.sequence), after #\(lastChecked) was checked: records pruned")
        }
        var acknowledged: [UInt64: (processID: Int32, entries: [CrashPayload.Entry])] = [:]
        for writer in writers {
            for ack in writer.acknowledged { acknowledged[ack.number] = (writer.processID, ack.entries) }
        }
        let newest = records.last?.sequence ?? lastChecked
        for number in acknowledged.keys.sorted() where number > newest {
            if mustSurvive(number) {
                problems.append("acknowledged commit #\(number) is missing (the store ends at #\(newest))")
            } else {
                lastLost.append(number)
                acknowledgedLost += 1
            }
        }
        var unacknowledgedByWriter: [Int32: [UInt64]] = [:]
        for record in records {
            problems += checkRecord(record)
            if let ack = acknowledged[record.sequence] {
                acknowledgedChecked += 1
                if ack.processID != record.processID {
                    problems.append(
                        "#\(record.sequence) was acknowledged by \(ack.processID), logged by \(record.processID)")
                }
                if let manifest = Self.manifest(of: record), manifest.entries != ack.entries {
                    problems.append("#\(record.sequence) acknowledged \(ack.entries), committed \(manifest.entries)")
                }
            } else {
                unacknowledgedCommits += 1
                unacknowledgedByWriter[record.processID, default: []].append(record.sequence)
            }
            commitsChecked += 1
            lastChecked = record.sequence
        }
        for (processID, numbers) in unacknowledgedByWriter {
            guard let writer = writers.first(where: { $0.processID == processID }) else {
                problems.append("commits \(numbers) come from process \(processID), which was not a writer")
                continue
            }
            let lastAcknowledged = writer.acknowledged.last?.number ?? 0
            if numbers.count > 1 || numbers[0] < lastAcknowledged {
                problems.append(
                    "writer \(processID) has unacknowledged commits \(numbers) (last acknowledged #\(lastAcknowledged))"
                )
            }
        }
        return problems
    }

    /// Checks that a record is one whole crash transaction and applies it to `expected`.
    private mutating func checkRecord(_ record: CommitRecord) -> [String] {
        let number = record.sequence
        guard let manifest = Self.manifest(of: record), manifest.number == number else {
            return ["#\(number) has no manifest for transaction \(number): \(record.changedKeys)"]
        }
        var problems: [String] = []
        var changes = Dictionary(record.changes.map { ($0.key, $0.encodedValue) }) { first, _ in first }
        changes[CrashPayload.manifestName] = nil
        for entry in manifest.entries {
            let name = CrashPayload.keyName(entry.index)
            let change = changes.removeValue(forKey: name)
            if let length = entry.length {
                let payload = change.flatMap { $0.flatMap(Self.dataPayload) }
                guard let payload, let decoded = CrashPayload.decodeValue(payload), decoded.number == number,
                    decoded.length == length
                else {
                    problems.append("#\(number): \(name) was not logged as set to transaction \(number)'s value")
                    continue
                }
                expected[name] = payload
            } else {
                // Removing a key that is not stored changes nothing and is not logged.
                let logged = change.map { $0 == nil } ?? (expected[name] == nil)
                if !logged { problems.append("#\(number): the removal of \(name) is not logged as one") }
                expected[name] = nil
            }
        }
        if !changes.isEmpty { problems.append("#\(number) changed keys it did not write: \(changes.keys.sorted())") }
        expected[CrashPayload.manifestName] = Array(CrashPayload.manifest(number: number, entries: manifest.entries))
        return problems
    }

    private func checkValues(_ values: [[UInt8]?]) -> [String] {
        var problems: [String] = []
        for (name, value) in zip(CrashPayload.allNames, values) where value != expected[name] {
            problems.append("\(name) holds \(value.map { "\($0.count) bytes" } ?? "nothing"), not what the log says")
        }
        for (name, value) in zip(CrashPayload.allNames.dropLast(), values) {
            if let value, CrashPayload.decodeValue(value) == nil { problems.append("\(name): a torn value") }
        }
        // The newest transaction's keys all carry its number: no half-applied transaction.
        if let bytes = values.last ?? nil, let manifest = CrashPayload.decodeManifest(bytes) {
            for entry in manifest.entries {
                let value = values[entry.index]
                let number = value.flatMap(CrashPayload.decodeValue)?.number
                if entry.length == nil ? value != nil : number != manifest.number {
                    problems.append("transaction \(manifest.number) is torn at \(CrashPayload.keyName(entry.index))")
                }
            }
        } else if values.last ?? nil != nil {
            problems.append("the manifest does not decode")
        }
        return problems
    }

    private static func manifest(of record: CommitRecord) -> (number: UInt64, entries: [CrashPayload.Entry])? {
        guard let change = record.changes.first(where: { $0.key == CrashPayload.manifestName }),
            let encoded = change.encodedValue, let payload = dataPayload(encoded)
        else { return nil }
        return CrashPayload.decodeManifest(payload)
    }

    private static func dataPayload(_ encoded: [UInt8]) -> [UInt8]? {
        guard case .data(let data)? = try? StoredValue(encodedValue: encoded) else { return nil }
        return Array(data)
    }

    private static func checkModes(path: String) -> [String] {
        var problems: [String] = []
        for (file, mode) in [(path, 0o700), (path + "/data.mdb", 0o600), (path + "/lock.mdb", 0o600)] {
            let attributes = try? FileManager.default.attributesOfItem(atPath: file)
            let actual = (attributes?[.posixPermissions] as? NSNumber)?.intValue
            if actual != mode { problems.append("\(file) has mode \(actual.map { String($0, radix: 8) } ?? "?")") }
        }
        return problems
    }
}

/// A check that could not go on.
struct CrashCheckFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Messages collected from an error handler.
final class ErrorList: Sendable {
    private let messages = Mutex<[String]>([])
    func append(_ message: String) { messages.withLock { $0.append(message) } }
    var all: [String] { messages.withLock { $0 } }
}
