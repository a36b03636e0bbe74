import Foundation

/// Where and how the numbers were measured.
struct RunHeader: Encodable {
    var date: String
    var command: String
    var machine: String
    var cpu: String
    var cores: Int
    var lmdbVersion: String
    var sqliteVersion: String
    var build: String
    var mode: String

    static func current(quick: Bool) -> RunHeader {
        var name = utsname()
        uname(&name)
        func field<T>(_ value: T) -> String {
            withUnsafeBytes(of: value) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
        let machine = "\(field(name.sysname)) \(field(name.release)) \(field(name.machine))"
        let cpu =
            (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?
            .split(separator: "\n").first { $0.hasPrefix("model name") }?
            .split(separator: ":", maxSplits: 1).last?.trimmingCharacters(in: .whitespaces) ?? "unknown"
        #if DEBUG
            let build = "debug (numbers are meaningless; use swift run -c release pdbench)"
        #else
            let build = "release (-c release: -O, whole-module)"
        #endif
        let formatter = ISO8601DateFormatter()
        return RunHeader(
            date: formatter.string(from: Date()),
            command: (["pdbench"] + CommandLine.arguments.dropFirst()).joined(separator: " "),
            machine: machine, cpu: cpu, cores: ProcessInfo.processInfo.activeProcessorCount,
            lmdbVersion: lmdbLibraryVersion(), sqliteVersion: sqliteLibraryVersion(), build: build,
            mode: quick ? "quick (short runs; figures are rough)" : "full")
    }

    var lines: [String] {
        [
            "date:    \(date)",
            "command: \(command)",
            "machine: \(machine), \(cores) cores, \(cpu)",
            "LMDB:    \(lmdbVersion)",
            "SQLite:  \(sqliteVersion)",
            "build:   \(build)",
            "mode:    \(mode)",
        ]
    }
}
