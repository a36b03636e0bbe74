import Foundation
import PDTestSupport

// The kill test: `pd-kill-test [--kills N] [--mode sync|bounded] [--seed S] [--writers W]
// [--max-delay-ms D] [--dir DIR]`.
//
// Each round starts W `pd-fixture crash-writer` processes on one store, kills each with SIGKILL
// after a random delay (0…D ms from its start, drawn from the seed), collects the commits each
// acknowledged, then opens the store and checks every invariant (CrashChecker) and runs
// `pdinspect check`. Rounds repeat until N writers were killed. Exit (ToolExitCode) 0 when every
// check passed, 1 on the first round with a problem (the store is kept for inspection), 2 on a
// usage error.

enum Mode: String {
    case sync, bounded
}

struct Settings {
    var kills = 500
    var bounded = false
    var seed: UInt64 = 1
    var writers = 2
    var maxDelayMilliseconds = 300
    var directory: String?

    init?(_ arguments: [String]) {
        do {
            let options = try DriverOptions(
                arguments, names: ["--kills", "--mode", "--seed", "--writers", "--max-delay-ms", "--dir"])
            kills = try options.number("--kills", default: kills, atLeast: 1)
            bounded = try options.choice("--mode", default: Mode.sync) == .bounded
            seed = try options.number("--seed", default: seed, atLeast: 0)
            writers = try options.number("--writers", default: writers, atLeast: 1)
            maxDelayMilliseconds = try options.number("--max-delay-ms", default: maxDelayMilliseconds, atLeast: 1)
            directory = options.text("--dir")
        } catch {
            return nil
        }
    }
}

func runRound(
    path: String, settings: Settings, round: Int, random: inout SplitMix64
) throws -> (reports: [WriterReport], kills: Int, problems: [String]) {
    let environment = [
        "PD_DURABILITY": settings.bounded ? "bounded" : "sync",
        "PD_LOG_RETENTION": "20000",  // more than a round commits, so the checker sees every record
    ]
    var children: [(child: ChildProcess, killAt: DispatchTime)] = []
    for _ in 0..<settings.writers {
        let child = try ChildProcess(
            Products.fixture, ["crash-writer", path, "\(random.next())"], environment: environment, errors: .separate)
        let delay = Int.random(in: 0...(settings.maxDelayMilliseconds * 1_000), using: &random)
        children.append((child, .now() + .microseconds(delay)))
    }
    var problems: [String] = []
    var kills = 0
    var reports: [WriterReport] = []
    for (child, killAt) in children.sorted(by: { $0.killAt < $1.killAt }) {
        // Waiting for the kill time is the test's schedule, not synchronisation.
        let wait = killAt.uptimeNanoseconds.subtractingReportingOverflow(DispatchTime.now().uptimeNanoseconds)
        if !wait.overflow { usleep(UInt32(min(wait.partialValue / 1_000, 10_000_000))) }
        kill(child.process.processIdentifier, SIGKILL)
    }
    for (child, _) in children {
        guard child.waitForExit(), child.waitForOutputEnd() else {
            problems.append("round \(round): writer \(child.process.processIdentifier) did not end after SIGKILL")
            continue
        }
        let output = child.text
        if child.process.terminationReason == .uncaughtSignal, child.process.terminationStatus == SIGKILL {
            kills += 1
        } else {
            problems.append(
                "writer \(child.process.processIdentifier) ended by itself (status \(child.process.terminationStatus)): "
                    + child.errorText)
        }
        // A last line without its newline was cut by the kill: not acknowledged.
        var lines = output.split(separator: "\n", omittingEmptySubsequences: false)
        lines.removeLast()
        var acknowledged: [(number: UInt64, entries: [CrashPayload.Entry])] = []
        for line in lines {
            guard let ack = CrashWriter.parseAcknowledgement(line) else {
                problems.append("round \(round): unreadable line from the writer: \(line)")
                continue
            }
            acknowledged.append(ack)
        }
        reports.append(WriterReport(processID: child.process.processIdentifier, acknowledged: acknowledged))
    }
    return (reports, kills, problems)
}

func main() -> ToolExitCode {
    guard let settings = Settings(Array(CommandLine.arguments.dropFirst())) else {
        FileHandle.standardError.write(
            Data(
                ("usage: pd-kill-test [--kills N] [--mode sync|bounded] [--seed S] [--writers W] [--max-delay-ms D]"
                    + " [--dir DIR]\n").utf8))
        return .usage
    }
    let path = settings.directory ?? temporaryPath("pd-kill-test")
    var random = SplitMix64(seed: settings.seed)
    var checker = CrashChecker()
    var kills = 0
    var round = 0
    var inspections = 0
    var killsMidStream = 0
    let start = DispatchTime.now()
    print(
        "pd-kill-test: \(settings.kills) kills, mode \(settings.bounded ? "bounded" : "sync"), seed \(settings.seed), store \(path)"
    )
    do {
        while kills < settings.kills {
            round += 1
            let result = try runRound(path: path, settings: settings, round: round, random: &random)
            kills += result.kills
            killsMidStream += result.reports.filter { !$0.acknowledged.isEmpty }.count
            var problems = result.problems
            problems += checker.check(path: path, writers: result.reports)
            if let failure = try pdinspectCheck(path) { problems.append(failure) } else { inspections += 1 }
            if !problems.isEmpty {
                print("pd-kill-test: round \(round) FAILED; store kept at \(path)")
                for problem in problems { print("  \(problem)") }
                return .checkFailed
            }
            if round % 25 == 0 {
                print("  round \(round): \(kills) kills, \(checker.commitsChecked) commits checked")
                fflush(nil)
            }
        }
    } catch {
        print("pd-kill-test: \(error)")
        return .checkFailed
    }
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
    print(
        """
        pd-kill-test: ok — \(kills) kills survived in \(round) rounds (\(String(format: "%.0f", seconds)) s)
          kills after the first commit  \(killsMidStream) (the others hit the writer while it started or opened the store)
          acknowledged commits checked  \(checker.acknowledgedChecked)
          commits checked in all        \(checker.commitsChecked) (log replayed against the data after every kill)
          committed but unacknowledged  \(checker.unacknowledgedCommits) (at most one per killed writer is allowed)
          pdinspect check passed        \(inspections) times
        """)
    try? FileManager.default.removeItem(atPath: path)
    return .success
}

main().exit()
