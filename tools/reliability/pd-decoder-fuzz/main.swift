import Foundation
import PDTestSupport

// The decoder fuzz run: `pd-decoder-fuzz [INPUTS] [SEED]` (default 1,000,000 inputs, seed 1).
// Prints the figures; exits (ToolExitCode) 1 when a problem was found, 2 on a usage error. A
// crash is the failure it is looking for: the process dies and the seed reproduces it.

let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count <= 2, let inputs = Int(arguments.first ?? "1000000"),
    let seed = UInt64(arguments.dropFirst().first ?? "1")
else {
    FileHandle.standardError.write(Data("usage: pd-decoder-fuzz [INPUTS] [SEED]\n".utf8))
    ToolExitCode.usage.exit()
}
let start = DispatchTime.now()
let figures = DecoderFuzzer.run(seed: seed, inputs: inputs)
let seconds = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
print("pd-decoder-fuzz: seed \(seed), \(String(format: "%.1f", seconds)) s, no crash")
print(figures)
for problem in figures.problems { print("  \(problem)") }
(figures.problems.isEmpty ? ToolExitCode.success : .checkFailed).exit()
