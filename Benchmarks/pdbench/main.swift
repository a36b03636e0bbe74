import Foundation
import PDTestSupport

/// Runs the selected cases, prints the table and ratios, writes the requested files.
func runBenchmarks(_ options: RunOptions) -> ToolExitCode {
    let header = RunHeader.current(quick: options.quick)
    for line in header.lines { print(line) }
    print("")
    let root = temporaryPath("pdbench")
    defer { try? FileManager.default.removeItem(atPath: root) }  // Best effort: each case removes its own.
    let context = RunContext(quick: options.quick, root: root)
    func selected(_ name: String) -> Bool {
        options.filters.isEmpty || options.filters.contains { name.contains($0) }
    }
    print(tableHeading)
    var measurements: [Measurement] = []
    var failures: [String] = []
    for benchmark in allCases where selected(benchmark.name) {
        do {
            for measurement in try benchmark.run(context) {
                measurements.append(measurement)
                print(tableLine(Report.Row(measurement)))
                fflush(nil)
            }
        } catch {
            failures.append("\(benchmark.name): \(error)")
            print("\(benchmark.name): FAILED: \(error)")
        }
    }
    let pending = pendingCases.filter { selected($0.name) }.map { "\($0.name): not yet available (\($0.reason))" }
    for line in pending { print(line) }
    let notes = measurements.compactMap { row in row.note.map { "  \(row.name): \($0)" } }
    if !notes.isEmpty {
        print("\nnotes:")
        for note in notes { print(note) }
    }
    let ratios = computeRatios(measurements)
    print("\nratios (p50s measured in this run):")
    for line in ratioLines(ratios) { print(line) }
    let report = Report(
        header: header, rows: measurements.map(Report.Row.init), ratios: ratios, notYetAvailable: pending,
        failures: failures)
    do {
        if let path = options.jsonPath { try writeJSON(report, to: path) }
        if let path = options.svgPath { try writeSVG(report, to: path) }
    } catch {
        print("could not write the output files: \(error)")
        return .checkFailed
    }
    return failures.isEmpty ? .success : .checkFailed
}

let exitCode: ToolExitCode
switch parseArguments(Array(CommandLine.arguments.dropFirst())) {
case .success(.help):
    print(usage)
    exitCode = .success
case .success(.userDefaultsOpenChild(let suite)):
    exit(runUserDefaultsOpenChild(suite: suite))
case .success(.stampChild(let path, let count)):
    exit(runStampChild(path: path, count: count))
case .success(.observeChild(let path, let key)):
    exit(runObserveChild(path: path, key: key))
case .success(.wakeFloorChild):
    exit(runWakeFloorChild())
case .success(.run(let options)):
    exitCode = runBenchmarks(options)
case .failure(let error):
    FileHandle.standardError.write(Data("pdbench: \(error)\n\(usage)\n".utf8))
    exitCode = .usage
}
exitCode.exit()
