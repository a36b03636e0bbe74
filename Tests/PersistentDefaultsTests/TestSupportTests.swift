import Foundation
import PDTestSupport
import Testing

/// The shared support target's own behaviour, including its failure paths.
@Suite struct TestSupportTests {
    @Test func driverOptionsReadTypedValuesAndRefuseWhatIsNotAllowed() throws {
        let names: Set = ["--kills", "--mode", "--seconds", "--dir"]
        let options = try DriverOptions(["--kills", "20", "--dir", "/tmp/x"], names: names)
        #expect(try options.number("--kills", default: 500, atLeast: 1) == 20)
        #expect(try options.number("--seconds", atLeast: 0.001) == nil)
        #expect(options.text("--dir") == "/tmp/x")
        #expect(try options.choice("--mode", default: ToolMode.sync) == .sync)
        #expect(throws: DriverOptions.Invalid.self) { try DriverOptions(["--kills"], names: names) }
        #expect(throws: DriverOptions.Invalid.self) { try DriverOptions(["--frobnicate", "1"], names: names) }
        let bad = try DriverOptions(["--kills", "0", "--mode", "fast", "--seconds", "x"], names: names)
        #expect(throws: DriverOptions.Invalid.self) { try bad.number("--kills", default: 500, atLeast: 1) }
        #expect(throws: DriverOptions.Invalid.self) { try bad.choice("--mode", default: ToolMode.sync) }
        #expect(throws: DriverOptions.Invalid.self) { try bad.number("--seconds", atLeast: 0.001) }
    }

    private enum ToolMode: String { case sync, bounded }

    @Test func exitCodesHaveOneMeaningEach() {
        let codes = ToolExitCode.allCases.map(\.rawValue)
        #expect(Set(codes).count == codes.count)
        #expect(ToolExitCode.success.rawValue == 0)
    }

    @Test func runProcessCollectsOutputAndErrorsAndTheStatus() throws {
        let result = try runProcess(URL(fileURLWithPath: "/bin/sh"), ["-c", "echo out; echo err >&2; exit 7"])
        #expect(result.status == 7 && result.exitedNormally)
        #expect(result.output.contains("out\n") && result.output.contains("err\n"))
    }

    @Test func aChildWaitsForALineAndKillsWhatOutlivesItsTimeout() throws {
        let child = try ChildProcess(
            URL(fileURLWithPath: "/bin/sh"), ["-c", "echo ready; echo oops >&2; read line; echo got $line"],
            input: .open, errors: .separate)
        #expect(child.line(startingWith: "ready") == "ready")
        #expect(child.waitForError(containing: "oops"))
        #expect(child.wait(for: "never", timeout: 0.2) == false)
        #expect(child.waitForExit(timeout: 0.2) == false)  // still reading its input: killed
        #expect(child.process.terminationReason == .uncaughtSignal)
        let echo = try ChildProcess(URL(fileURLWithPath: "/bin/cat"), [], input: .text("hello"))
        #expect(echo.waitForExit() && echo.waitForOutputEnd())
        #expect(echo.text == "hello")
    }

    @Test func aMissingFixtureOrExecutableIsAnError() {
        #expect(throws: (any Error).self) { try ChildProcess(Products.url("no-such-product"), []) }
    }
}
