import Foundation
import PersistentDefaults

/// `pdinspect describe DB KEY`: a key's declaration, value and newest logged change.
struct DescribeVerb: VerbCommand {
    var database: String
    var key: String
    var format: OutputFormat

    static let name = "describe"
    static let synopsis = "DB KEY [--json]"
    static let summary = "KEY's declared type, default and summary, its value and its last logged change"
    static let options = [OptionSpec.json]
    static let details = """
        Shows what the code declared (type, default, summary, the commit that declared it), the
        stored value, and the newest commit-log record that changed KEY (sequence, time, pid),
        if the log still holds one. Exit 1 if KEY is neither stored nor declared.
        """

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        let (database, key) = try arguments.databaseAndKey()
        return Self(database: database, key: key, format: arguments.format)
    }

    func run(in runner: Runner) throws {
        // One snapshot: on a store that others write, the value and the last change are of one commit.
        let (declaration, stored, last, logRange) = try runner.open(database).read { snapshot in
            (
                try snapshot.declaration(named: key),
                // The raw bytes, so that a value that does not decode is shown instead of failing.
                try snapshot.storedEntries(prefix: key).first { $0.name.utf8.elementsEqual(key.utf8) },
                try snapshot.newestCommit(changing: key), try snapshot.logRange()
            )
        }
        guard stored != nil || declaration != nil else {
            throw CommandFailure(.failure, "key \"\(key)\" is neither stored nor declared")
        }
        let value = stored.flatMap { try? $0.decoded.get() }
        var problem = stored.flatMap { entry -> String? in
            guard case .failure(let error) = entry.decoded else { return nil }
            return "the stored value does not decode: \(error)"
        }
        if let value, let declaration, let mismatch = declaration.mismatch(of: value) { problem = mismatch }
        let lastChange = last.map { record in
            DescribeReport.Commit(
                sequence: record.sequence, timestamp: TextTable.timestamp(record.timestamp),
                processID: record.processID,
                removed: record.changes.last { $0.key.utf8.elementsEqual(key.utf8) }?.encodedValue == nil)
        }
        let defaultValue = try? declaration?.defaultValue()
        if format == .json {
            try runner.printJSON(
                DescribeReport(
                    name: key, declared: declaration != nil, type: declaration?.typeName ?? value?.tag.description,
                    defaultValue: defaultValue.map(TypedValue.init), summary: declaration?.summary,
                    declaredIn: declaration.map {
                        .init(
                            sequence: $0.sequence, timestamp: TextTable.timestamp($0.date), processID: $0.processID)
                    },
                    stored: stored != nil, value: value.map(TypedValue.init), problem: problem, lastChange: lastChange))
            return
        }
        var rows = [["key", TextTable.cell(key)]]
        if let declaration {
            rows.append(["type", declaration.typeName + " (declared)"])
            rows.append(["default", defaultValue.map { TextTable.cell($0.description) } ?? "(does not decode)"])
            rows.append(["summary", declaration.summary.map(TextTable.cell) ?? "(none)"])
            rows.append([
                "declared",
                "#\(declaration.sequence)  \(TextTable.timestamp(declaration.date))  pid \(declaration.processID)",
            ])
        } else {
            rows.append(["type", (value?.tag.description ?? "invalid") + " (not declared)"])
        }
        if let stored {
            rows.append([
                "value", value.map { TextTable.cell($0.description) } ?? "(\(stored.encodedValue.count) bytes)",
            ])
        } else {
            rows.append(["value", "not stored: reads give the default"])
        }
        if let problem { rows.append(["problem", TextTable.cell(problem)]) }
        if let lastChange {
            rows.append([
                "last change",
                "#\(lastChange.sequence)  \(lastChange.timestamp)  pid \(lastChange.processID)"
                    + (lastChange.removed == true ? "  (removed)" : ""),
            ])
        } else {
            let range = logRange.map { "#\($0.lowerBound)…#\($0.upperBound)" } ?? "empty"
            rows.append(["last change", "none in the commit log (it holds \(range))"])
        }
        runner.console.print(TextTable.render(rows))
    }
}

/// `describe --json`: what the code declared, the stored value, and the last logged change.
private struct DescribeReport: Encodable {
    struct Commit: Encodable {
        var sequence: UInt64
        var timestamp: String
        var processID: Int32
        /// For the last change: whether the key was removed.
        var removed: Bool?
    }

    var name: String
    var declared: Bool
    var type: String?
    var defaultValue: TypedValue?
    var summary: String?
    var declaredIn: Commit?
    var stored: Bool
    var value: TypedValue?
    /// Why the stored value does not decode, or does not decode as the declared type.
    var problem: String?
    var lastChange: Commit?

    private enum CodingKeys: String, CodingKey {
        case name, declared, type, summary, declaredIn, stored, value, problem, lastChange
        case defaultValue = "default"
    }
}

extension Verb {
    /// `describe`
    public static let describe = Verb(DescribeVerb.self)
}

extension Command {
    /// Print a key's declaration, value and newest logged change.
    public static func describe(database: String, key: String, format: OutputFormat) -> Command {
        Command(DescribeVerb(database: database, key: key, format: format))
    }
}
