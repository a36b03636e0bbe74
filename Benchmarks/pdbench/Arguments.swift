/// What the command line asks for.
enum Command: Equatable {
    case run(RunOptions)
    case help
    /// Internal: time one UserDefaults open in this child process.
    case userDefaultsOpenChild(suite: String)
    /// Internal: the child of `observers/delay-cross-process`.
    case stampChild(path: String, count: Int)
    /// Internal: the observing child of the `observers/…-process…` cases.
    case observeChild(path: String, key: String)
    /// Internal: the floor child of `observers/idle-cpu-wake-floor`.
    case wakeFloorChild
}

/// Options of a benchmark run.
struct RunOptions: Equatable {
    var quick = false
    /// Run only cases whose name contains one of these (all when empty).
    var filters: [String] = []
    var jsonPath: String?
    var svgPath: String?
}

/// A command line that cannot be understood.
struct ArgumentError: Error, Equatable, CustomStringConvertible {
    var description: String
}

let usage = """
    usage: pdbench [--quick] [--filter SUBSTRING]... [--json FILE] [--svg FILE]

      --quick            run every case briefly (CI: proves the benchmark still runs; asserts nothing)
      --filter SUBSTRING run only cases whose name contains SUBSTRING (repeatable)
      --json FILE        write the header, every row and the ratios as JSON
      --svg FILE         write a bar chart of the p50s (log scale) as SVG
      --help             print this
    """

private let knownFlags = ["--quick", "--filter", "--json", "--svg", "--help"]

/// Parses the arguments after the program name; pure, so it can be tested.
func parseArguments(_ arguments: [String]) -> Result<Command, ArgumentError> {
    if arguments.count == 2, arguments[0] == childOpenFlag {
        return .success(.userDefaultsOpenChild(suite: arguments[1]))
    }
    if arguments.count == 3, arguments[0] == childStampFlag, let count = Int(arguments[2]) {
        return .success(.stampChild(path: arguments[1], count: count))
    }
    if arguments.count == 3, arguments[0] == childObserveFlag {
        return .success(.observeChild(path: arguments[1], key: arguments[2]))
    }
    if arguments == [childWakeFloorFlag] { return .success(.wakeFloorChild) }
    var options = RunOptions()
    var remaining = arguments[...]
    while let argument = remaining.popFirst() {
        switch argument {
        case "--quick": options.quick = true
        case "--help", "-h": return .success(.help)
        case "--filter", "--json", "--svg":
            guard let value = remaining.popFirst() else {
                return .failure(ArgumentError(description: "\(argument) needs a value"))
            }
            if argument == "--filter" { options.filters.append(value) }
            if argument == "--json" { options.jsonPath = value }
            if argument == "--svg" { options.svgPath = value }
        default:
            var message = "unknown argument \"\(argument)\""
            if let nearest = knownFlags.min(by: { editDistance($0, argument) < editDistance($1, argument) }),
                editDistance(nearest, argument) <= 3
            {
                message += "; did you mean \(nearest)?"
            }
            return .failure(ArgumentError(description: message))
        }
    }
    return .success(.run(options))
}

/// Levenshtein distance between two strings, by characters.
func editDistance(_ first: String, _ second: String) -> Int {
    let a = Array(first)
    let b = Array(second)
    guard !a.isEmpty else { return b.count }
    guard !b.isEmpty else { return a.count }
    var previous = Array(0...b.count)
    for i in 1...a.count {
        var current = [i] + Array(repeating: 0, count: b.count)
        for j in 1...b.count {
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        }
        previous = current
    }
    return previous[b.count]
}
