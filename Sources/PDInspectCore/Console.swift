import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Where `pdinspect` writes: standard output and standard error, unbuffered, so that streamed
/// lines (`watch`, `log --follow`) appear at once and never interleave out of order.
public struct Console: Sendable {
    private let output: @Sendable (String) -> Void
    private let error: @Sendable (String) -> Void

    /// A console writing to the given functions (tests can collect the text).
    public init(output: @escaping @Sendable (String) -> Void, error: @escaping @Sendable (String) -> Void) {
        self.output = output
        self.error = error
    }

    /// The process's standard output and standard error.
    public static let standard = Console(
        output: { writeAll($0, to: STDOUT_FILENO) }, error: { writeAll($0, to: STDERR_FILENO) })

    /// Writes `text` to standard output.
    func print(_ text: String) { output(text) }

    /// Writes one line to standard error, prefixed with `pdinspect: `.
    func report(_ message: String) {
        error("pdinspect: " + message.replacingOccurrences(of: "\n", with: " ") + "\n")
    }

    /// Writes raw text to standard error.
    func printError(_ text: String) { error(text) }

    private static func writeAll(_ text: String, to descriptor: Int32) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if written < 0, errno == EINTR { continue }
            // A closed pipe or a full disk: nothing more can be shown, so stop trying.
            guard written > 0 else { return }
            bytes = bytes.dropFirst(written)
        }
    }
}
