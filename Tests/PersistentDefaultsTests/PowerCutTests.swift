import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// `pcdisk.so`, compiled once from tools/power-cut-disk/pcdisk.c into a temporary directory;
/// nil when gcc is missing or the build fails (the tests then say so).
private let simulatedDisk: String? = {
    let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("tools/power-cut-disk/pcdisk.c").path
    let output = temporaryPath("pcdisk") + ".so"
    let result = try? runProcess(
        URL(fileURLWithPath: "/usr/bin/gcc"),
        [
            "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O2", "-fPIC", "-shared", "-o", output, source, "-ldl",
            "-lpthread",
        ])
    return result?.status == 0 ? output : nil
}()

/// Runs `pd-power-cut-test` with the simulated disk; its exit status and output.
private func powerCut(_ arguments: [String]) throws -> ProcessResult {
    try runProcess(
        Products.url("pd-power-cut-test"), arguments + ["--disk", simulatedDisk ?? "-"])
}

/// The figure after `label` in the driver's summary, such as `acknowledged commits checked present`.
private func figure(_ label: String, in output: String) -> Int? {
    guard let line = output.split(separator: "\n").first(where: { $0.contains(label) }) else { return nil }
    return line.dropFirst(line.range(of: label)!.upperBound.utf16Offset(in: line)).split(separator: " ").first
        .flatMap { Int($0) }
}

@Suite("Reliability: power cuts", .serialized)
struct PowerCutTests {
    @Test func theSimulatedDiskBuildsWithoutWarnings() {
        #expect(simulatedDisk != nil, "gcc -Wall -Wextra -Werror tools/power-cut-disk/pcdisk.c failed")
    }

    /// `.sync`: after each cut every acknowledged commit is in the store and the store is intact.
    @Test(.enabled(if: simulatedDisk != nil, "needs gcc for the simulated disk"))
    func syncKeepsEveryAcknowledgedCommitThroughPowerCuts() throws {
        let result = try powerCut(["--cuts", "6", "--mode", "sync", "--seed", "11"])
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains("ok — 6 cuts"), "\(result.output)")
        #expect((figure("acknowledged commits checked present", in: result.output) ?? 0) > 0, "\(result.output)")
        #expect(figure("acknowledged commits missing (required)", in: result.output) == 0, "\(result.output)")
        #expect(figure("stores with a problem (then replaced)", in: result.output) == 0, "\(result.output)")
    }

    /// `.bounded`: the driver accepts damaged stores as findings but fails on a lost commit
    /// that was synced or older than the interval; a clean exit is the assertion.
    @Test(.enabled(if: simulatedDisk != nil, "needs gcc for the simulated disk"))
    func boundedLosesOnlyUnsyncedCommitsWhenTheStoreSurvives() throws {
        let result = try powerCut(["--cuts", "6", "--mode", "bounded", "--interval-ms", "200", "--seed", "12"])
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains("ok — 6 cuts"), "\(result.output)")
        #expect(figure("acknowledged commits missing (required)", in: result.output) == 0, "\(result.output)")
    }

    /// The self-test: a writer that acknowledges before its commits are synced must be caught.
    @Test(.enabled(if: simulatedDisk != nil, "needs gcc for the simulated disk"))
    func aWriterThatAcknowledgesBeforeSyncingIsCaught() throws {
        let result = try powerCut(["--cuts", "4", "--mode", "broken", "--max-delay-ms", "1000", "--seed", "13"])
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains("the self-test passed"), "\(result.output)")
        #expect((figure("acknowledged commits missing (required)", in: result.output) ?? 0) > 0, "\(result.output)")
    }

    /// A copy (`copy(to:compact:)`, what `pdinspect compact` writes) is on disk when the call
    /// returns: a power cut right after it, on a disk that loses every unsynced write, leaves
    /// the whole copy. Before, nothing synced it and the cut left an empty `data.mdb`.
    @Test(.enabled(if: simulatedDisk != nil, "needs gcc for the simulated disk"))
    func aCopyIsOnDiskWhenItReturns() throws {
        try withTemporaryDirectory { base throws in
            let source = base + "/store"
            let copy = base + "/copy"
            let keys = (0..<50).map { PersistentDefaults.Key<Int>("k\($0)", default: -1) }
            try PersistentDefaults(path: source).write { transaction in
                for (index, key) in keys.enumerated() { transaction[key] = index }
            }
            try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: false)
            let child = try ChildProcess(
                Products.fixture, ["copy-and-hold", source, copy],
                environment: [
                    "LD_PRELOAD": simulatedDisk ?? "", "PCDISK_CUT_AT_INPUT_END": "1", "PCDISK_KEEP": "0",
                    "PCDISK_SEED": "1",
                ],
                input: .open, errors: .separate)
            defer { child.kill() }
            #expect(child.wait(for: "copied"), "\(child.text) \(child.errorText)")
            child.closeInput()  // The cut.
            #expect(child.waitForExit(timeout: 20))
            #expect(child.waitForOutputEnd(timeout: 20))
            #expect(child.errorText.contains("pcdisk: cut"), "\(child.errorText)")
            var existing = PersistentDefaults.Options()
            existing.createIfMissing = false
            let copied = try PersistentDefaults(path: copy, options: existing)
            #expect(try copied.read { snapshot in keys.map { snapshot[$0] } } == Array(0..<50))
            #expect(try copied.verify().isEmpty)
        }
    }

    @Test func cutLinesAndTimedAcknowledgementsParse() throws {
        let line =
            "pcdisk: cut t=900 synced=500 writes=12 sectors=40 latest=10 older=5 reverted=25 torn=1 size=8192->4096"
            + " meta=ahead forgotten=0 p=0.50"
        let report = try #require(PowerCutReport(line: line[...]))
        #expect(report.time == 900 && report.synced == 500 && report.writes == 12 && report.sectors == 40)
        #expect(report.latest == 10 && report.older == 5 && report.reverted == 25 && report.torn == 1)
        #expect(report.sizeBefore == 8192 && report.sizeAfter == 4096 && report.metaAhead && report.reordered)
        #expect(report.keepProbability == 0.5)
        #expect(PowerCutReport(line: "pcdisk: refused: data.mdb is mapped writable") == nil)
        let ack = PowerCut.acknowledgement(
            number: 7, entries: [.init(index: 3, length: 10), .init(index: 4, length: nil)], time: 42)
        let parsed = try #require(PowerCut.parseAcknowledgement(ack[...]))
        #expect(
            parsed.number == 7 && parsed.time == 42
                && parsed.entries == [.init(index: 3, length: 10), .init(index: 4, length: nil)])
        #expect(PowerCut.parseAcknowledgement("ack 7 3:10") == nil)
    }
}
