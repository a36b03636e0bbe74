import Foundation

/// Runs `pdinspect check STORE` in a child process, as the kill and power-cut tests check a store
/// after each kill or cut: nil when it passes, else one line saying how it failed — its first
/// output line, a crash (by signal) or a hang (still running after `timeout` seconds), so that a
/// damaged store cannot take the driver down with it.
public func pdinspectCheck(_ path: String, timeout: Double = 120) throws -> String? {
    let child = try ChildProcess(Products.pdinspect, ["check", path], errors: .merged)
    guard child.waitForExit(timeout: timeout), child.waitForOutputEnd() else { return "pdinspect check hung" }
    if child.process.terminationReason == .uncaughtSignal {
        return "pdinspect check crashed (signal \(child.process.terminationStatus))"
    }
    let firstLine = child.lines.first ?? ""
    return child.process.terminationStatus == 0 ? nil : "pdinspect check: \(firstLine)"
}
