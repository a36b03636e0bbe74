/// One parsed `pdinspect` invocation: what to do, to which store, with which options.
///
/// ```swift
/// let command = try CommandParser.parse(["get", "/var/lib/app/settings", "launchCount"])
/// // .get(database: "/var/lib/app/settings", key: "launchCount", format: .human)
/// ```
///
/// Each verb's file in `Verbs/` adds the static function that builds its command (`.get(…)`).
public struct Command: Sendable, Equatable {
    /// The verb's parsed arguments, which also run it.
    let body: any CommandBody

    init(_ body: some CommandBody) { self.body = body }

    /// Commands are equal when they are the same verb with the same arguments.
    public static func == (lhs: Command, rhs: Command) -> Bool { lhs.body.isEqual(to: rhs.body) }
}

/// How a reading verb prints its result.
public enum OutputFormat: Sendable, Equatable {
    /// Aligned text for people.
    case human
    /// One JSON document, or one JSON object per line for streams (`log --follow`, `watch`).
    case json
}

/// How `watch` and `log --follow` follow new commits, and when they stop by themselves.
public struct FollowOptions: Sendable, Equatable {
    /// Start after this sequence number; nil for "after the newest commit at start".
    public var since: UInt64?
    /// Stop after printing this many events; nil to run until interrupted.
    public var maxEvents: Int?
    /// Stop after this many seconds; nil to run until interrupted.
    public var timeout: Double?

    /// Creates follow options.
    public init(since: UInt64? = nil, maxEvents: Int? = nil, timeout: Double? = nil) {
        self.since = since
        self.maxEvents = maxEvents
        self.timeout = timeout
    }

    /// When a follow that starts now stops by itself: `timeout` from now, bounded (a timeout
    /// given through the API has not been checked by the parser); nil without a timeout.
    func deadline() -> ContinuousClock.Instant? {
        timeout.map { ContinuousClock.now + ParsedArguments.timeoutDuration(seconds: $0) }
    }
}

extension FollowOptions {
    /// The help's lines on how `log --follow` and `watch` stop.
    static let details = """
        --max-events and --timeout make the command stop by itself (for scripts and tests);
        otherwise it follows until SIGINT or SIGTERM, woken by each commit like any observer
        of the store. With --json, one JSON object per line. A malformed log key or record
        ends it with one line and exit 3; records asked for that the log no longer holds (an
        old --since N, or a follower that fell behind the log's retention) with exit 1.
        """
}
