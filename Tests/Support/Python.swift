import Foundation

/// Runs a Python 3 script (`python3 -c SCRIPT ARGUMENTS…`) to its end; its exit status.
public func runPython(_ script: String, _ arguments: [String] = []) throws -> Int32 {
    try runProcess(URL(fileURLWithPath: "/usr/bin/env"), ["python3", "-c", script] + arguments).status
}

/// Whether `python3` can import the `lmdb` package (an LMDB client outside this library, for
/// interoperability tests; `tools/setup` installs it).
public let pythonHasLMDB: Bool = (try? runPython("import lmdb")) == 0
