import Foundation
import PDTestSupport

// The power-loss test: `pd-power-cut-test [--cuts N] [--mode sync|bounded|broken] [--seed S]
// [--interval-ms I] [--max-delay-ms D] [--slack-ms L] [--disk PATH] [--dir DIR] [--keep DIR]
// [--seconds T]`: N cuts, or as many as T seconds allow (the summary gives the number).
//
// Each cut starts one `pd-fixture power-writer` on the store with the simulated disk
// (`pcdisk.so`, built from tools/power-cut-disk/pcdisk.c) preloaded. The disk cuts the power
// 0…D ms after the writer opened data.mdb (the delay and the disk's own choices come from the
// seed): it leaves in the file what a power loss could have left of the writes not yet synced,
// prints what it did, and kills the writer. The store is then opened without the simulator and
// checked: `pdinspect check` (in a child, so a crash on a damaged store is a finding, not the
// driver's death), then every invariant of the kill test (CrashChecker).
//
//   sync     every acknowledged commit must be there and the store intact, or the run fails.
//   bounded  `.bounded(interval: I)`: a damaged store is counted with its cause (lmdb.h allows
//            it without write ordering) and replaced by a fresh one; on an intact store a lost
//            acknowledged commit must have been acknowledged after the last sync began, and
//            less than I + L ms before the cut, or the run fails.
//   broken   the self-test: the writer runs `.bounded(interval: I)` but the checker treats its
//            acknowledgements as durable, as a writer that acknowledges before syncing claims,
//            and the disk loses every unsynced write (PCDISK_KEEP=0, so the store stays intact);
//            the run passes only if the checker reports lost acknowledged commits.
//
// Exit (ToolExitCode) 0 when the mode's expectations held, 1 otherwise (the store is kept), 2 on a usage error.

enum Mode: String {
    case sync, bounded, broken
}

struct Settings {
    var cuts = 1_000
    var mode = Mode.sync
    var seed: UInt64 = 1
    var intervalMilliseconds = 200
    var maxDelayMilliseconds = 400
    var slackMilliseconds = 100
    var disk: String?
    var directory: String?
    var keep: String?
    var seconds: Double?

    init?(_ arguments: [String]) {
        do {
            let options = try DriverOptions(
                arguments,
                names: [
                    "--cuts", "--mode", "--seed", "--interval-ms", "--max-delay-ms", "--slack-ms", "--disk", "--dir",
                    "--keep", "--seconds",
                ])
            cuts = try options.number("--cuts", default: cuts, atLeast: 1)
            mode = try options.choice("--mode", default: mode)
            seed = try options.number("--seed", default: seed, atLeast: 0)
            intervalMilliseconds = try options.number("--interval-ms", default: intervalMilliseconds, atLeast: 1)
            maxDelayMilliseconds = try options.number("--max-delay-ms", default: maxDelayMilliseconds, atLeast: 1)
            slackMilliseconds = try options.number("--slack-ms", default: slackMilliseconds, atLeast: 0)
            disk = options.text("--disk")
            directory = options.text("--dir")
            keep = options.text("--keep")
            seconds = try options.number("--seconds", atLeast: Double.leastNonzeroMagnitude)
        } catch {
            return nil
        }
    }
}

/// What one writer did before the power was cut.
struct CutOutcome {
    var report: PowerCutReport?
    var writer: WriterReport
    var times: [UInt64: UInt64] = [:]
    var problems: [String] = []
    /// The signal that ended the writer when it was not the cut's SIGKILL.
    var crashSignal: Int32?
    /// LMDB's line when the writer stopped on a damaged store before any cut.
    var writerFoundDamage: String?
}

func runWriter(path: String, settings: Settings, disk: String, random: inout SplitMix64) throws -> CutOutcome {
    var environment: [String: String] = [:]
    environment["PD_DURABILITY"] = settings.mode == .sync ? "sync" : "bounded"
    environment["PD_BOUNDED_MS"] = "\(settings.intervalMilliseconds)"
    environment["PD_LOG_RETENTION"] = "20000"  // more than a cut commits, so the checker sees every record
    environment["PD_LOG_RETENTION_BYTES"] = "\(64 << 20)"  // the 4 MiB default prunes within a 1 s bounded cut
    environment["LD_PRELOAD"] = disk
    let delay = Int.random(in: 0...(settings.maxDelayMilliseconds * 1_000), using: &random)
    environment["PCDISK_CUT_AFTER_US"] = "\(delay)"
    environment["PCDISK_SEED"] = "\(random.next())"
    // The self-test's disk loses every unsynced write: the store stays intact and what the
    // broken writer acknowledged since its last sync is gone, which the checker must see.
    if settings.mode == .broken { environment["PCDISK_KEEP"] = "0" }
    let child = try ChildProcess(
        Products.fixture, ["power-writer", path, "\(random.next())"], environment: environment, errors: .separate)
    let process = child.process
    var outcome = CutOutcome(writer: WriterReport(processID: process.processIdentifier, acknowledged: []))
    // The disk cuts after at most D ms of the writer's life; its pipes close when it dies.
    let limit = Double(settings.maxDelayMilliseconds) / 1_000 + 120
    guard child.waitForExit(timeout: limit) else {
        outcome.problems.append("the writer was still running \(Int(limit)) s after it started")
        return outcome
    }
    guard child.waitForOutputEnd() else {
        outcome.problems.append("the writer's pipes stayed open after it died")
        return outcome
    }
    let (errorText, outputText) = (child.errorText, child.text)
    if process.terminationReason == .uncaughtSignal, process.terminationStatus != SIGKILL {
        outcome.crashSignal = process.terminationStatus
    }
    // LMDB refused the store before any cut: the previous cut damaged pages the checks do not
    // read (such as the free-page list, which only a writer uses).
    if process.terminationReason == .exit, process.terminationStatus != 0,
        let line = errorText.split(separator: "\n").first(where: { line in
            ["MDB_CORRUPTED", "MDB_PAGE_NOTFOUND"].contains { line.contains($0) }
        })
    {
        outcome.writerFoundDamage = String(line)
    }
    for line in errorText.split(separator: "\n") {
        if let report = PowerCutReport(line: line) { outcome.report = report }
    }
    if outcome.crashSignal == nil, outcome.writerFoundDamage == nil,
        outcome.report == nil || process.terminationReason != .uncaughtSignal || process.terminationStatus != SIGKILL
    {
        outcome.problems.append(
            "the writer ended without a cut (status \(process.terminationStatus)): \(errorText.suffix(2_000))")
    }
    // A last line without its newline was cut off: not acknowledged.
    var lines = outputText.split(separator: "\n", omittingEmptySubsequences: false)
    lines.removeLast()
    for line in lines {
        guard let ack = PowerCut.parseAcknowledgement(line) else {
            outcome.problems.append("unreadable line from the writer: \(line)")
            continue
        }
        outcome.writer.acknowledged.append((ack.number, ack.entries))
        outcome.times[ack.number] = ack.time
    }
    return outcome
}

/// A problem line with its numbers and paths taken out, to count failures by kind.
func kind(of problem: String, path: String) -> String {
    let withoutPath = problem.replacingOccurrences(of: path, with: "STORE")
    return withoutPath.replacingOccurrences(of: "[0-9]+", with: "N", options: .regularExpression)
}

/// Counts and figures of a whole run.
struct Tally {
    var cuts = 0
    var cutsWithAcknowledgements = 0
    var unsyncedWrites = 0
    var tornWrites = 0
    var reorderedCuts = 0
    var metaAheadCuts = 0
    var damaged = 0
    var damagedMetaAhead = 0
    var causes: [String: Int] = [:]
    var cutsWithLoss = 0
    var oldestLossMilliseconds = 0.0
    var longestSinceSyncMilliseconds = 0.0
    var inspections = 0
    var acknowledgedBeforeDamage = 0
    var caught = 0
    var damagedBeforeFirstSync = 0
    var missingAcknowledged = 0
    /// Acknowledged commits checked present and lost with leave, by the checkers already replaced.
    var checkedBefore = 0
    var lostBefore = 0
}

func milliseconds(_ nanoseconds: UInt64) -> Double { Double(nanoseconds) / 1e6 }

func main() -> ToolExitCode {
    guard let settings = Settings(Array(CommandLine.arguments.dropFirst())) else {
        FileHandle.standardError.write(
            Data(
                ("usage: pd-power-cut-test [--cuts N] [--mode sync|bounded|broken] [--seed S] [--interval-ms I]"
                    + " [--max-delay-ms D] [--slack-ms L] [--disk PATH] [--dir DIR] [--keep DIR] [--seconds T]\n").utf8)
        )
        return .usage
    }
    let disk = settings.disk ?? Products.url("pcdisk.so").path
    guard FileManager.default.fileExists(atPath: disk) else {
        print("pd-power-cut-test: no simulated disk at \(disk) (tools/power-cut builds it)")
        return .usage
    }
    let path = settings.directory ?? temporaryPath("pd-power-cut-test")
    var random = SplitMix64(seed: settings.seed)
    var checker = CrashChecker()
    var tally = Tally()
    var kept = 0
    let start = DispatchTime.now()
    let modeName = settings.mode == .sync ? "sync" : "bounded(\(settings.intervalMilliseconds) ms)"
    print(
        "pd-power-cut-test: \(settings.cuts) cuts, mode \(settings.mode) (\(modeName)), seed \(settings.seed), store \(path)"
    )
    fflush(nil)
    do {
        let deadline = settings.seconds.map { DispatchTime.now() + $0 } ?? .distantFuture
        while tally.cuts < settings.cuts, DispatchTime.now() < deadline {
            let before = settings.keep.map { $0 + "/before-last-cut" }
            if let before {
                // The store as the writer found it, to study a writer crash.
                try? FileManager.default.createDirectory(atPath: settings.keep!, withIntermediateDirectories: true)
                try? FileManager.default.removeItem(atPath: before)
                try? FileManager.default.copyItem(atPath: path, toPath: before)
            }
            let outcome = try runWriter(path: path, settings: settings, disk: disk, random: &random)
            tally.cuts += 1
            if outcome.crashSignal != nil || outcome.writerFoundDamage != nil {
                // The store passed every check after the last cut, yet the next writer crashed on
                // it or found it damaged.
                let cause =
                    outcome.crashSignal.map {
                        "the next writer crashed (signal \($0)) on a store that passed the checks after its cut"
                    } ?? "the next writer found the store damaged after the checks passed: "
                    + kind(of: outcome.writerFoundDamage ?? "", path: path)
                guard settings.mode != .sync, outcome.problems.isEmpty else {
                    print("pd-power-cut-test: cut \(tally.cuts) FAILED: \(cause); store kept at \(path)")
                    return .checkFailed
                }
                tally.damaged += 1
                tally.causes[cause, default: 0] += 1
                if let before, let keep = settings.keep {
                    try? FileManager.default.moveItem(atPath: before, toPath: keep + "/writer-crash-\(tally.cuts)")
                }
                tally.checkedBefore += checker.acknowledgedChecked
                tally.lostBefore += checker.acknowledgedLost
                try? FileManager.default.removeItem(atPath: path)
                checker = CrashChecker()
                continue
            }
            if !outcome.writer.acknowledged.isEmpty { tally.cutsWithAcknowledgements += 1 }
            guard let report = outcome.report, outcome.problems.isEmpty else {
                print("pd-power-cut-test: cut \(tally.cuts) FAILED; store kept at \(path)")
                for problem in outcome.problems { print("  \(problem)") }
                return .checkFailed
            }
            tally.unsyncedWrites += report.writes
            tally.tornWrites += report.torn
            if report.reordered { tally.reorderedCuts += 1 }
            if report.metaAhead { tally.metaAheadCuts += 1 }
            if report.synced > 0 {
                tally.longestSinceSyncMilliseconds = max(
                    tally.longestSinceSyncMilliseconds, milliseconds(report.time - report.synced))
            }
            let inspection = try pdinspectCheck(path)
            var problems: [String] = []
            if let inspection {
                // A damaged store: LMDB may crash on it (SIGBUS past the end of a truncated file),
                // so it is not opened in this process.
                problems.append(inspection)
            } else {
                tally.inspections += 1
                let mustSurvive: (UInt64) -> Bool =
                    switch settings.mode {
                    case .sync, .broken: { _ in true }
                    // Acknowledged before the last sync began: on the disk, whatever the cut did.
                    case .bounded: { number in (outcome.times[number] ?? .max) < report.synced }
                    }
                problems += checker.check(path: path, writers: [outcome.writer], mustSurvive: mustSurvive)
            }
            let missing = problems.filter { $0.hasPrefix("acknowledged commit #") }
            let damage = problems.filter { !$0.hasPrefix("acknowledged commit #") }
            switch settings.mode {
            case .sync:
                if !problems.isEmpty, report.synced == 0, outcome.writer.acknowledged.isEmpty {
                    // LMDB writes a new file's meta pages without a sync; the store's first
                    // commit syncs them. A cut in between leaves a store that never opened.
                    tally.damagedBeforeFirstSync += 1
                } else if !problems.isEmpty {
                    print("pd-power-cut-test: cut \(tally.cuts) FAILED (\(report)); store kept at \(path)")
                    for problem in problems { print("  \(problem)") }
                    return .checkFailed
                }
            case .bounded:
                if damage.isEmpty, !missing.isEmpty {
                    print(
                        "pd-power-cut-test: cut \(tally.cuts) FAILED: synced commits lost (\(report)); store kept at \(path)"
                    )
                    for problem in missing { print("  \(problem)") }
                    return .checkFailed
                }
                if damage.isEmpty, !checker.lastLost.isEmpty {
                    tally.cutsWithLoss += 1
                    let oldest = checker.lastLost.compactMap { outcome.times[$0] }.min() ?? report.time
                    let age = milliseconds(report.time - min(oldest, report.time))
                    tally.oldestLossMilliseconds = max(tally.oldestLossMilliseconds, age)
                    if age > Double(settings.intervalMilliseconds + settings.slackMilliseconds) {
                        print(
                            "pd-power-cut-test: cut \(tally.cuts) FAILED: lost a commit acknowledged \(age) ms before the cut,"
                                + " more than the interval (\(settings.intervalMilliseconds) ms) + \(settings.slackMilliseconds) ms"
                        )
                        return .checkFailed
                    }
                }
            case .broken:
                break
            }
            if !problems.isEmpty {
                // bounded: a damaged store; broken: the self-test caught the writer. Start afresh.
                tally.damaged += 1
                if report.synced == 0, settings.mode != .sync { tally.damagedBeforeFirstSync += 1 }
                if report.metaAhead { tally.damagedMetaAhead += 1 }
                tally.acknowledgedBeforeDamage += outcome.writer.acknowledged.count
                tally.causes[kind(of: (damage.first ?? missing.first)!, path: path), default: 0] += 1
                tally.missingAcknowledged += missing.count
                if !missing.isEmpty { tally.caught += 1 }
                tally.checkedBefore += checker.acknowledgedChecked
                tally.lostBefore += checker.acknowledgedLost
                // The first five, and every store that crashed pdinspect (a defect to study).
                let crashed = problems.contains { $0.hasPrefix("pdinspect check crashed") }
                if let keep = settings.keep, kept < 5 || crashed {
                    try? FileManager.default.createDirectory(atPath: keep, withIntermediateDirectories: true)
                    try? FileManager.default.copyItem(
                        atPath: path, toPath: keep + (crashed ? "/crash-" : "/cut-") + "\(tally.cuts)")
                    kept += 1
                }
                try? FileManager.default.removeItem(atPath: path)
                checker = CrashChecker()
            }
            if tally.cuts % 50 == 0 {
                print(
                    "  cut \(tally.cuts): \(tally.checkedBefore + checker.acknowledgedChecked) acknowledged commits"
                        + " checked, \(tally.damaged) " + (settings.mode == .broken ? "caught" : "damaged"))
                fflush(nil)
            }
        }
    } catch {
        print("pd-power-cut-test: \(error)")
        return .checkFailed
    }
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
    let causes = tally.causes.sorted { $0.value > $1.value }.map { "    \($0.value)× \($0.key)" }.joined(
        separator: "\n")
    print(
        """
        pd-power-cut-test: \(settings.mode == .broken ? "self-test" : "ok") — \(tally.cuts) cuts in \(String(format: "%.0f", seconds)) s
          cuts after the first acknowledged commit  \(tally.cutsWithAcknowledgements)
          unsynced writes at the cuts               \(tally.unsyncedWrites) (\(tally.tornWrites) kept torn; \(tally.reorderedCuts) cuts reordered, \(tally.metaAheadCuts) kept a newer meta page)
          longest time since the last sync          \(String(format: "%.1f", tally.longestSinceSyncMilliseconds)) ms
          acknowledged commits checked present      \(tally.checkedBefore + checker.acknowledgedChecked)
          acknowledged commits lost (allowed)       \(tally.lostBefore + checker.acknowledgedLost) in \(tally.cutsWithLoss) cuts of intact stores, the oldest acknowledged \(String(format: "%.1f", tally.oldestLossMilliseconds)) ms before its cut
          acknowledged commits missing (required)   \(tally.missingAcknowledged) in \(tally.caught) cuts
          pdinspect check passed                    \(tally.inspections) of \(tally.cuts)
          stores with a problem (then replaced)     \(tally.damaged) (\(tally.damagedMetaAhead) of them with a newer meta page kept, \(tally.damagedBeforeFirstSync) before the store's first sync), \(tally.acknowledgedBeforeDamage) acknowledgements in those cuts
        """)
    if !causes.isEmpty { print("  by first problem:\n" + causes) }
    if settings.mode == .broken {
        guard tally.caught > 0 else {
            print("pd-power-cut-test: the self-test FAILED: no cut showed the broken writer's lost acknowledgements")
            return .checkFailed
        }
        print("pd-power-cut-test: the self-test passed: the checker caught the broken writer")
    }
    try? FileManager.default.removeItem(atPath: path)
    return .success
}

main().exit()
