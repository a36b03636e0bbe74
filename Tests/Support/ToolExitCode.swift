import Foundation

/// How the test fixture, the reliability drivers and pdbench end: one meaning per number.
/// (`pdinspect` has its own, documented `ExitCode`: it is a shipped tool.)
public enum ToolExitCode: Int32, Sendable, CaseIterable {
    /// Everything asked for was done and every check passed.
    case success = 0
    /// A check found a problem (a driver's invariant, a fuzz finding) or a benchmark case failed.
    case checkFailed = 1
    /// The arguments were not understood.
    case usage = 2
    /// A store operation threw (the error is printed on standard error).
    case storeError = 3

    /// Ends the process with this code.
    public func exit() -> Never { Foundation.exit(rawValue) }
}
