import Foundation
import Synchronization

/// A child's output pipe, read to its end on another thread so that a full pipe never stalls
/// the child.
///
/// ```swift
/// let output = Pipe()
/// process.standardOutput = output
/// try process.run()
/// let drain = OutputDrain(output.fileHandleForReading)
/// let text = drain.text(timeout: 30)  // nil if the pipe stays open that long
/// ```
public final class OutputDrain: Sendable {
    private let data = Mutex(Data())
    private let done = DispatchSemaphore(value: 0)

    /// Starts reading `handle` until end of file.
    public init(_ handle: FileHandle) {
        DispatchQueue.global().async { [self] in
            let bytes = handle.readDataToEndOfFile()
            data.withLock { $0 = bytes }
            done.signal()
        }
    }

    /// Waits up to `timeout` seconds for end of file (it comes at once when the child died,
    /// unless a grandchild holds the pipe) and returns everything read; nil on timeout.
    public func text(timeout: Double = 30) -> String? {
        guard done.wait(timeout: .now() + timeout) == .success else { return nil }
        return data.withLock { String(decoding: $0, as: UTF8.self) }
    }
}
