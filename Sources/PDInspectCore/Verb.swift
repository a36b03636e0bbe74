/// The verbs `pdinspect` understands, with the help text of each.
public enum Verb: String, Sendable, CaseIterable {
    /// `keys DB [--prefix P] [--all]`
    case keys
    /// `get DB KEY`
    case get
    /// `describe DB KEY`
    case describe
    /// `set DB KEY VALUE --type T`
    case set
    /// `delete DB KEY`
    case delete
    /// `dump DB`
    case dump
    /// `export DB FILE`
    case export
    /// `import DB FILE`
    case `import`
    /// `stat DB`
    case stat
    /// `log DB [--since N] [--limit N] [--follow]`
    case log
    /// `watch DB [KEY...]`
    case watch
    /// `check DB`
    case check
    /// `compact DB OUT`
    case compact
    /// `readers DB [--clear-stale]`
    case readers
    /// `mirror DB --etcd URL[,URL] --etcd-prefix P --local-prefix L`
    case mirror

    /// The arguments after the verb, as the help prints them.
    public var synopsis: String {
        switch self {
        case .keys: "DB [--prefix P] [--all] [--json]"
        case .get: "DB KEY [--json]"
        case .describe: "DB KEY [--json]"
        case .set: "DB KEY VALUE --type T [--force]"
        case .delete: "DB KEY"
        case .dump: "DB [--json]"
        case .export: "DB FILE"
        case .import: "DB FILE [--replace] [--force]"
        case .stat: "DB [--json]"
        case .log: "DB [--since N] [--limit N] [--follow] [--json]"
        case .watch: "DB [KEY...] [--prefix P] [--since N] [--json]"
        case .check: "DB [--json]"
        case .compact: "DB OUT [--json]"
        case .readers: "DB [--clear-stale] [--json]"
        case .mirror: "DB --etcd URL[,URL] --etcd-prefix P --local-prefix L"
        }
    }

    /// One line saying what the verb does.
    public var summary: String {
        switch self {
        case .keys: "name, type and size of each stored key; with --all also declared keys not stored"
        case .get: "the decoded value of KEY, or its declared default (exit 1 if neither)"
        case .describe: "KEY's declared type, default and summary, its value and its last logged change"
        case .set: "store VALUE under KEY as type T, in one logged transaction"
        case .delete: "remove KEY (exit 1 if absent)"
        case .dump: "every key with its decoded value"
        case .export: "write every key to FILE as JSON, types preserved (- for stdout)"
        case .import: "store every key of an export FILE in one transaction (- for stdin)"
        case .stat: "format version, entries, map size and use, readers, log range, file sizes"
        case .log: "the commit log, oldest first"
        case .watch: "print each committed change until interrupted"
        case .check: "verify that every value decodes and the log is consistent (exit 1 if not)"
        case .compact: "write a compacted copy of the store into the directory OUT"
        case .readers: "the reader lock table"
        case .mirror: "make keys under L follow etcd keys under P, until SIGINT or SIGTERM"
        }
    }

    /// Whether the verb only reads, so the store is opened read-only.
    public var isReadOnly: Bool {
        switch self {
        case .set, .delete, .import, .mirror: false
        default: true
        }
    }

    /// The options the verb accepts, each with whether it takes a value.
    var options: [OptionSpec] {
        let json = OptionSpec("--json", help: "machine-readable output")
        let since = OptionSpec("--since", value: "N", help: "start after commit sequence number N")
        let maxEvents = OptionSpec("--max-events", value: "N", help: "stop after printing N events")
        let timeout = OptionSpec("--timeout", value: "SECONDS", help: "stop after SECONDS")
        let force = OptionSpec("--force", help: "store a value even when its type is not the key's declared type")
        switch self {
        case .keys:
            return [
                OptionSpec("--prefix", value: "P", help: "only keys whose name starts with P"),
                OptionSpec("--all", help: "also list declared keys that are not stored, with their default"), json,
            ]
        case .get, .describe, .dump, .stat, .check, .compact: return [json]
        case .set:
            return [
                OptionSpec(
                    "--type", value: "T",
                    help: "the value's type: " + ValueType.allCases.map(\.rawValue).joined(separator: ", ")),
                force,
            ]
        case .delete, .export: return []
        case .import: return [OptionSpec("--replace", help: "also remove the keys that FILE does not list"), force]
        case .log:
            return [
                OptionSpec("--since", value: "N", help: "records after sequence number N (default: all)"),
                OptionSpec("--limit", value: "N", help: "at most N records; without --since the newest N"),
                OptionSpec("--follow", help: "keep printing new commits until interrupted"),
                maxEvents, timeout, json,
            ]
        case .watch:
            return [
                OptionSpec(
                    "--prefix", value: "P", help: "only keys whose names start with P (compared as UTF-8 bytes)"),
                since, maxEvents, timeout, json,
            ]
        case .readers: return [OptionSpec("--clear-stale", help: "first free the slots of dead processes"), json]
        case .mirror:
            return [
                OptionSpec("--etcd", value: "URL[,URL]", help: "etcd client URLs (http://HOST:PORT), comma-separated"),
                OptionSpec("--etcd-prefix", value: "P", help: "the etcd keys mirrored start with P"),
                OptionSpec("--local-prefix", value: "L", help: "local key L<name> follows etcd key P<name>"),
                timeout,
            ]
        }
    }

    /// Extra lines for the verb's help: formats, examples and caveats.
    var details: String {
        switch self {
        case .get:
            """
            Prints strings raw, data as <hex>, dates in ISO 8601. With --json: {"name","type","value"}.
            A key that is not stored but declared (PersistentDefaults.declare) prints its declared
            default, says so on standard error and exits 0; with --json "default": true is added.
            """
        case .describe:
            """
            Shows what the code declared (type, default, summary, the commit that declared it), the
            stored value, and the newest commit-log record that changed KEY (sequence, time, pid),
            if the log still holds one. Exit 1 if KEY is neither stored nor declared.
            """
        case .keys:
            "With --all, a declared key that is not stored is listed with its declared type and \"(default …)\"."
        case .set:
            """
            VALUE by type: bool true|false|yes|no|1|0; int and uint decimal; double a decimal or
            inf/-inf/nan; string as given; date ISO 8601 (2026-01-31T12:00:00Z) or seconds since
            1970; data hex (0a1b2c, optionally <0a 1b 2c>); json any JSON text; url; uuid.
            Example: pdinspect set ~/settings launchCount 3 --type int
            A key declared by the code (PersistentDefaults.declare) takes only its declared type: another
            type exits 2 naming the declared one, unless --force. A value larger than 64 MiB exits 2.
            """
        case .export:
            """
            The file (mode 0600) looks like {"format":"pdinspect-export","version":1,
            "keys":{"launchCount":{"type":"int","value":3}, ...}}. Data is base64, dates are
            seconds since 1970, json values are embedded as JSON.
            """
        case .import:
            """
            The whole file is validated first; a malformed file changes nothing. So does a value whose
            type is not its key's declared type (unless --force) or that is larger than 64 MiB.
            """
        case .log, .watch:
            """
            --max-events and --timeout make the command stop by itself (for scripts and tests);
            otherwise it follows until SIGINT or SIGTERM, woken by each commit like any observer
            of the store. With --json, one JSON object per line.
            """
        case .compact:
            "OUT is created when missing and must be empty; the copy leaves out free pages."
        case .mirror:
            """
            Creates DB when missing. Copies the etcd prefix at one revision in one commit, then applies
            each etcd revision as one commit, resuming after the revision recorded in DB. Keys under L
            are then owned by the mirror: set, delete and import refuse them. Values in etcd are the
            typed JSON of one value, as export writes it:
              etcdctl put /fleet/myservice/maxConnections '{"type":"int","value":300}'
            Prints each change of state (live, reconnecting) on standard error. Runs until SIGINT or
            SIGTERM (a systemd service), or --timeout SECONDS.
            """
        default: ""
        }
    }
}

/// One option of a verb.
struct OptionSpec: Sendable {
    var name: String
    /// The placeholder of the option's value; nil for a flag.
    var value: String?
    var help: String

    init(_ name: String, value: String? = nil, help: String) {
        self.name = name
        self.value = value
        self.help = help
    }
}
