import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

@testable import PDInspectCore

/// A command line and the command it must parse into.
struct ParseCase: CustomTestStringConvertible, Sendable {
    var arguments: [String]
    var expected: Command
    var testDescription: String { arguments.joined(separator: " ") }
}

/// A command line that must be refused, and a part of the message.
struct RefusalCase: CustomTestStringConvertible, Sendable {
    var arguments: [String]
    var message: String
    var testDescription: String { arguments.joined(separator: " ") }
}

private let longKey = String(repeating: "k", count: 512)

@Suite("CommandParser")
struct CommandParserTests {
    static let accepted: [ParseCase] = [
        .init(arguments: ["--help"], expected: .help(nil)),
        .init(arguments: ["-h"], expected: .help(nil)),
        .init(arguments: ["help"], expected: .help(nil)),
        .init(arguments: ["help", "log"], expected: .help(.log)),
        .init(arguments: ["get", "--help"], expected: .help(.get)),
        .init(arguments: ["set", "db", "-h"], expected: .help(.set)),
        .init(arguments: ["keys", "db"], expected: .keys(database: "db", prefix: "", format: .human)),
        .init(
            arguments: ["keys", "db", "--prefix", "window.", "--json"],
            expected: .keys(database: "db", prefix: "window.", format: .json)),
        .init(arguments: ["keys", "--prefix=a", "db"], expected: .keys(database: "db", prefix: "a", format: .human)),
        .init(
            arguments: ["keys", "db", "--all", "--prefix", "w"],
            expected: .keys(database: "db", prefix: "w", all: true, format: .human)),
        .init(arguments: ["describe", "db", "k"], expected: .describe(database: "db", key: "k", format: .human)),
        .init(
            arguments: ["describe", "db", "k", "--json"], expected: .describe(database: "db", key: "k", format: .json)),
        .init(
            arguments: ["set", "db", "n", "5", "--type", "int", "--force"],
            expected: .set(database: "db", key: "n", value: .int(5), force: true)),
        .init(
            arguments: ["import", "db", "in.json", "--force"],
            expected: .import(database: "db", file: "in.json", replace: false, force: true)),
        .init(arguments: ["get", "db", "k"], expected: .get(database: "db", key: "k", format: .human)),
        .init(arguments: ["get", "db", "k", "--json"], expected: .get(database: "db", key: "k", format: .json)),
        .init(arguments: ["get", "db", "--", "--odd"], expected: .get(database: "db", key: "--odd", format: .human)),
        // After `--`, and as an option's value, `-h` and `--help` are arguments, not a request for help.
        .init(arguments: ["get", "db", "--", "-h"], expected: .get(database: "db", key: "-h", format: .human)),
        .init(
            arguments: ["set", "db", "--type", "string", "--", "k", "--help"],
            expected: .set(database: "db", key: "k", value: .string("--help"))),
        .init(
            arguments: ["keys", "db", "--prefix", "-h"], expected: .keys(database: "db", prefix: "-h", format: .human)),
        .init(
            arguments: ["set", "db", "n", "-5", "--type", "int"],
            expected: .set(database: "db", key: "n", value: .int(-5))),
        .init(
            arguments: ["set", "db", "n", "18446744073709551615", "--type=uint"],
            expected: .set(database: "db", key: "n", value: .uint(.max))),
        .init(
            arguments: ["set", "db", "b", "yes", "--type", "bool"],
            expected: .set(database: "db", key: "b", value: .bool(true))),
        .init(
            arguments: ["set", "db", "b", "0", "--type", "bool"],
            expected: .set(database: "db", key: "b", value: .bool(false))),
        .init(
            arguments: ["set", "db", "d", "0.5", "--type", "double"],
            expected: .set(database: "db", key: "d", value: .double(0.5))),
        .init(
            arguments: ["set", "db", "d", "-inf", "--type", "double"],
            expected: .set(database: "db", key: "d", value: .double(-.infinity))),
        .init(
            arguments: ["set", "db", "s", "hi there", "--type", "string"],
            expected: .set(database: "db", key: "s", value: .string("hi there"))),
        .init(
            arguments: ["set", "db", "t", "2027-01-15T08:00:00Z", "--type", "date"],
            expected: .set(database: "db", key: "t", value: .date(Date(timeIntervalSince1970: 1_800_000_000)))),
        .init(
            arguments: ["set", "db", "t", "1800000000", "--type", "date"],
            expected: .set(database: "db", key: "t", value: .date(Date(timeIntervalSince1970: 1_800_000_000)))),
        .init(
            arguments: ["set", "db", "x", "<0a 1B>", "--type", "data"],
            expected: .set(database: "db", key: "x", value: .data(Data([0x0a, 0x1b])))),
        .init(
            arguments: ["set", "db", "j", #"{"b": 1, "a": [true, null]}"#, "--type", "json"],
            expected: .set(database: "db", key: "j", value: .json(#"{"a":[true,null],"b":1}"#))),
        .init(
            arguments: ["set", "db", "u", "https://example.com/a", "--type", "url"],
            expected: .set(database: "db", key: "u", value: .url(URL(string: "https://example.com/a")!))),
        .init(
            arguments: ["set", "db", "id", "E621E1F8-C36C-495A-93FC-0C247A3E6E5F", "--type", "uuid"],
            expected: .set(
                database: "db", key: "id", value: .uuid(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!))),
        .init(arguments: ["delete", "db", "k"], expected: .delete(database: "db", key: "k")),
        .init(arguments: ["dump", "db", "--json"], expected: .dump(database: "db", format: .json)),
        .init(arguments: ["export", "db", "out.json"], expected: .export(database: "db", file: "out.json")),
        .init(arguments: ["import", "db", "-"], expected: .import(database: "db", file: "-", replace: false)),
        .init(
            arguments: ["import", "db", "in.json", "--replace"],
            expected: .import(database: "db", file: "in.json", replace: true)),
        .init(arguments: ["stat", "db"], expected: .stat(database: "db", format: .human)),
        .init(
            arguments: [
                "mirror", "db", "--etcd", "http://a:1,http://b:2", "--etcd-prefix", "/f/", "--local-prefix", "f.",
            ],
            expected: .mirror(
                database: "db", endpoints: ["http://a:1", "http://b:2"], etcdPrefix: "/f/", localPrefix: "f.")
        ),
        .init(
            arguments: [
                "mirror", "db", "--local-prefix=f.", "--etcd=http://a:1", "--etcd-prefix", "/f/", "--timeout", "2",
            ],
            expected: .mirror(
                database: "db", endpoints: ["http://a:1"], etcdPrefix: "/f/", localPrefix: "f.", timeout: 2)),
        .init(
            arguments: ["log", "db"], expected: .log(database: "db", range: LogRange(), follow: nil, format: .human)),
        .init(
            arguments: ["log", "db", "--since", "4", "--limit", "2", "--json"],
            expected: .log(database: "db", range: LogRange(since: 4, limit: 2), follow: nil, format: .json)),
        .init(
            arguments: ["log", "db", "--follow", "--max-events", "3", "--timeout", "1.5"],
            expected: .log(
                database: "db", range: LogRange(), follow: FollowOptions(maxEvents: 3, timeout: 1.5), format: .human)),
        .init(
            arguments: ["watch", "db"],
            expected: .watch(database: "db", keys: [], follow: FollowOptions(), format: .human)),
        .init(
            arguments: ["watch", "db", "a", "b", "--since", "0", "--json"],
            expected: .watch(database: "db", keys: ["a", "b"], follow: FollowOptions(since: 0), format: .json)),
        .init(
            arguments: ["watch", "db", "--prefix", "fleet."],
            expected: .watch(database: "db", keys: [], follow: FollowOptions(), format: .human, prefix: "fleet.")),
        .init(arguments: ["check", "db", "--json"], expected: .check(database: "db", format: .json)),
        .init(
            arguments: ["compact", "db", "out"], expected: .compact(database: "db", destination: "out", format: .human)),
        .init(arguments: ["readers", "db"], expected: .readers(database: "db", clearStale: false, format: .human)),
        .init(
            arguments: ["readers", "db", "--clear-stale", "--json"],
            expected: .readers(database: "db", clearStale: true, format: .json)),
    ]

    @Test(arguments: accepted)
    func parses(_ testCase: ParseCase) throws {
        #expect(try CommandParser.parse(testCase.arguments) == testCase.expected)
    }

    static let refused: [RefusalCase] = [
        .init(arguments: [], message: "no verb given"),
        .init(arguments: ["dupm", "db"], message: "unknown verb 'dupm'; did you mean 'dump'?"),
        .init(arguments: ["stats", "db"], message: "did you mean 'stat'?"),
        .init(arguments: ["frobnicate"], message: "unknown verb 'frobnicate' (see"),
        .init(arguments: ["--json", "keys"], message: "expected a verb before options, found '--json'"),
        .init(arguments: ["--hlep"], message: "did you mean '--help'?"),
        .init(arguments: ["--help", "x"], message: "unexpected argument 'x' after --help"),
        .init(arguments: ["help", "gett"], message: "did you mean 'get'?"),
        .init(arguments: ["help", "get", "x"], message: "unexpected argument 'x'"),
        .init(arguments: ["keys"], message: "missing DB"),
        .init(arguments: ["keys", ""], message: "the database path is empty"),
        .init(arguments: ["keys", "db", "extra"], message: "unexpected argument 'extra'"),
        .init(
            arguments: ["keys", "db", "--jsno"], message: "unknown option '--jsno' for keys; did you mean '--json'?"),
        .init(arguments: ["keys", "db", "-x"], message: "unknown option '-x' for keys"),
        .init(arguments: ["keys", "db", "--prefix"], message: "--prefix needs a value P"),
        .init(arguments: ["keys", "db", "--json", "--json"], message: "--json is given twice"),
        .init(arguments: ["keys", "db", "--json=yes"], message: "--json takes no value"),
        .init(arguments: ["get", "db"], message: "missing KEY"),
        .init(arguments: ["get", "db", ""], message: "a key name must not be empty"),
        .init(arguments: ["get", "db", longKey], message: "512 UTF-8 bytes; at most 511 are allowed"),
        .init(arguments: ["set", "db", "k", "1"], message: "set needs --type T"),
        .init(arguments: ["set", "db", "k", "--type", "int"], message: "missing VALUE"),
        .init(arguments: ["set", "db", "k", "1", "--type", "integer"], message: "unknown type 'integer'"),
        .init(arguments: ["set", "db", "k", "1", "--type", "strng"], message: "did you mean 'string'?"),
        .init(arguments: ["set", "db", "k", "abc", "--type", "int"], message: "'abc' is not a valid int value"),
        .init(arguments: ["set", "db", "k", "99999999999999999999", "--type", "int"], message: "not a valid int"),
        .init(arguments: ["set", "db", "k", "-1", "--type", "uint"], message: "not a valid uint"),
        .init(arguments: ["set", "db", "k", "maybe", "--type", "bool"], message: "not a valid bool"),
        .init(arguments: ["set", "db", "k", "1e999", "--type", "double"], message: "not a valid double"),
        .init(arguments: ["set", "db", "k", "yesterday", "--type", "date"], message: "not a valid date"),
        .init(arguments: ["set", "db", "k", "0a1", "--type", "data"], message: "not a valid data"),
        .init(arguments: ["set", "db", "k", "zz", "--type", "data"], message: "not a valid data"),
        .init(arguments: ["set", "db", "k", "{", "--type", "json"], message: "not a valid json"),
        .init(arguments: ["set", "db", "k", "not a url", "--type", "url"], message: "not a valid url"),
        .init(arguments: ["set", "db", "k", "1234", "--type", "uuid"], message: "not a valid uuid"),
        .init(arguments: ["set", "db", longKey, "1", "--type", "int"], message: "at most 511 are allowed"),
        .init(
            arguments: ["set", "db", "k", "1", "--type", "int", "--json"], message: "unknown option '--json' for set"),
        .init(arguments: ["delete", "db", "k", "--json"], message: "delete takes no options"),
        .init(arguments: ["describe", "db"], message: "missing KEY"),
        .init(arguments: ["describe", "db", ""], message: "a key name must not be empty"),
        .init(arguments: ["describe", "db", "k", "--all"], message: "unknown option '--all' for describe"),
        .init(arguments: ["get", "db", "k", "--all"], message: "unknown option '--all' for get"),
        .init(arguments: ["keys", "db", "--al"], message: "did you mean '--all'?"),
        .init(arguments: ["set", "db", "k", "1", "--type", "int", "--force=yes"], message: "--force takes no value"),
        .init(arguments: ["set", "db", "k", "1", "--type", "int", "--forse"], message: "did you mean '--force'?"),
        .init(arguments: ["export", "db"], message: "missing FILE"),
        .init(arguments: ["import", "db", "f", "--replace=1"], message: "--replace takes no value"),
        .init(arguments: ["log", "db", "--since", "-1"], message: "--since needs a sequence number"),
        .init(arguments: ["log", "db", "--limit", "0"], message: "--limit needs a whole number above 0"),
        .init(arguments: ["log", "db", "--max-events", "2"], message: "--max-events and --timeout need --follow"),
        .init(arguments: ["log", "db", "--follow", "--timeout", "soon"], message: "--timeout needs a number"),
        .init(arguments: ["log", "db", "--folow"], message: "did you mean '--follow'?"),
        .init(arguments: ["log", "db", "--follow", "--timeout", "1e10"], message: "at most 1000000000"),
        .init(arguments: ["watch", "db", "--timeout", "1e300"], message: "at most 1000000000"),
        .init(
            arguments: [
                "mirror", "db", "--etcd", "http://h:1", "--etcd-prefix", "/f/", "--local-prefix", "f.", "--timeout",
                "1e17",
            ],
            message: "at most 1000000000"),
        .init(arguments: ["watch", "db", "", "--json"], message: "a key name must not be empty"),
        .init(arguments: ["watch", "db", "--max-events", "x"], message: "--max-events needs a whole number"),
        .init(
            arguments: ["watch", "db", "--prefix", String(repeating: "p", count: 512)],
            message: "--prefix is longer than any key can be"),
        .init(arguments: ["compact", "db"], message: "missing OUT"),
        .init(arguments: ["readers", "db", "--clear"], message: "did you mean '--clear-stale'?"),
        .init(
            arguments: ["mirror", "db", "--etcd-prefix", "/f/", "--local-prefix", "f."], message: "mirror needs --etcd"),
        .init(
            arguments: ["mirror", "db", "--etcd", "http://h:1", "--local-prefix", "f."],
            message: "mirror needs --etcd-prefix"),
        .init(
            arguments: ["mirror", "db", "--etcd", "http://h:1", "--etcd-prefix", "/f/"],
            message: "mirror needs --local-prefix"),
        .init(
            arguments: ["mirror", "db", "--etcd", "h:2379", "--etcd-prefix", "/f/", "--local-prefix", "f."],
            message: "--etcd takes http://HOST:PORT URLs, not 'h:2379'"),
        .init(
            arguments: ["mirror", "db", "--etcd", "http://h:1", "--etcd-prefx", "/f/", "--local-prefix", "f."],
            message: "did you mean '--etcd-prefix'?"),
    ]

    @Test(arguments: refused)
    func refuses(_ testCase: RefusalCase) {
        #expect {
            _ = try CommandParser.parse(testCase.arguments)
        } throws: { error in
            "\(error)".contains(testCase.message)
        }
    }

    @Test func everyVerbHasHelpNamingItsOptions() {
        for verb in Verb.allCases {
            let text = HelpText.help(for: verb)
            #expect(text.hasPrefix("usage: pdinspect \(verb.rawValue) "))
            for option in verb.options { #expect(text.contains(option.name)) }
            #expect(HelpText.overview.contains("\(verb.rawValue) \(verb.synopsis)"))
        }
        for code in ExitCode.allCases { #expect(HelpText.overview.contains("\(code.rawValue)  \(code.meaning)")) }
    }
}

@Suite("Suggestions and preflight")
struct HelperTests {
    @Test(arguments: [
        ("dump", "dump", 0), ("dupm", "dump", 1), ("dmp", "dump", 1), ("", "abc", 3), ("kitten", "sitting", 3),
    ])
    func editDistance(_ lhs: String, _ rhs: String, _ distance: Int) {
        #expect(Suggestion.editDistance(lhs, rhs) == distance)
    }

    @Test func noHintForFarWords() {
        #expect(Suggestion.closest(to: "frobnicate", among: Verb.allCases.map(\.rawValue)) == nil)
    }
}
