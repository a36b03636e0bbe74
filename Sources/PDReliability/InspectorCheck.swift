import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The directory of the running executable, where the package's other products (`pd-worker`,
/// `pdinspect`) are built next to it.
public let productsDirectory = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    .deletingLastPathComponent()

/// Runs `pdinspect check STORE` in a child process, as the kill and power-cut tests check a store
/// after each kill or cut: nil when it passes, else one line saying how it failed — its first
/// output line, a crash (by signal) or a hang (no end of output within `timeout` seconds), so
/// that a damaged store cannot take the driver down with it.
public func pdinspectCheck(_ path: String, timeout: Double = 120) throws -> String? {
    let process = Process()
    process.executableURL = productsDirectory.appendingPathComponent("pdinspect")
    process.arguments = ["check", path]
    let output = Pipe()
    process.standardOutput = output
    process.standardError = output
    try process.run()
    guard let text = OutputDrain(output.fileHandleForReading).text(timeout: timeout) else {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        return "pdinspect check hung"
    }
    process.waitUntilExit()
    if process.terminationReason == .uncaughtSignal {
        return "pdinspect check crashed (signal \(process.terminationStatus))"
    }
    let firstLine = text.split(separator: "\n").first.map(String.init) ?? ""
    return process.terminationStatus == 0 ? nil : "pdinspect check: \(firstLine)"
}
