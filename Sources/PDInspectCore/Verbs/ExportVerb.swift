import Foundation
import PersistentDefaults

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `pdinspect export DB FILE`: every key to a JSON file, types preserved.
struct ExportVerb: VerbCommand {
    var database: String
    var file: String

    static let name = "export"
    static let synopsis = "DB FILE"
    static let summary = "write every key to FILE as JSON, types preserved (- for stdout)"
    static let options: [OptionSpec] = []
    static let details = """
        The file (mode 0600) looks like {"format":"pdinspect-export","version":1,
        "keys":{"launchCount":{"type":"int","value":3}, ...}}. Data is base64, dates are
        seconds since 1970, json values are embedded as JSON.
        """

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        let values = try arguments.positionals(["DB", "FILE"])
        return Self(database: values[0], file: values[1])
    }

    func run(in runner: Runner) throws {
        let store = try runner.open(database)
        if file != "-" { try Self.checkReplaceable(file, store: store.path) }
        let document = try ExportDocument(try store.storedEntries()) { entry, reason in
            switch reason {
            case .undecodable(let error):
                throw CommandFailure(
                    .unavailable, "cannot export: value of \"\(entry.name)\" does not decode: \(error)")
            case .sameString, .nameNotUTF8:
                throw CommandFailure(.unavailable, "cannot export \"\(entry.name)\": \(reason)")
            }
        }
        let data = try JSONCoding.pretty.encode(document) + Data("\n".utf8)
        if file == "-" {
            runner.console.print(String(decoding: data, as: UTF8.self))
        } else {
            try Self.writePrivateFile(file, data)
            runner.console.printError("exported \(document.keys.count) keys to \(file)\n")
        }
    }

    /// Refuses a `path` that the rename into place must not replace: one that exists and is not a
    /// regular file (a directory, a FIFO, a device such as `/dev/full`), or a file of the store's
    /// own directory (`data.mdb`: the export would replace the store it reads).
    private static func checkReplaceable(_ path: String, store: String) throws(CommandFailure) {
        var info = stat()
        guard stat(path, &info) == 0 else { return }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw CommandFailure(.usage, "\(path) exists and is not a regular file; nothing was written")
        }
        guard let resolved = realpath(path, nil) else { return }
        defer { free(resolved) }
        if String(cString: resolved).hasPrefix(store + "/") {
            throw CommandFailure(.usage, "\(path) is a file of the store \(store); nothing was written")
        }
    }

    /// Writes `data` to `path` with mode 0600, through a temporary file renamed into place, so
    /// that the file is never readable by others and never half written; the file and then its
    /// directory are synced, so that the export is on disk when the command ends.
    private static func writePrivateFile(_ path: String, _ data: Data) throws(CommandFailure) {
        let temporary = path + ".pdinspect-\(getpid())"
        func failure(_ operation: String) -> CommandFailure {
            CommandFailure(.unavailable, "cannot \(operation) \(path): \(String(cString: strerror(errno)))")
        }
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw failure("write") }
        var remaining = data[...]
        while !remaining.isEmpty {
            let written = remaining.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else {
                let error = failure("write")
                close(descriptor)
                unlink(temporary)
                throw error
            }
            remaining = remaining.dropFirst(written)
        }
        // The umask may have narrowed 0600 further, never widened it; make it exactly 0600.
        guard fchmod(descriptor, 0o600) == 0, fsync(descriptor) == 0, close(descriptor) == 0 else {
            let error = failure("write")
            unlink(temporary)
            throw error
        }
        guard rename(temporary, path) == 0 else {
            let error = failure("rename into")
            unlink(temporary)
            throw error
        }
        // The rename is an entry of the directory, which syncing the file did not make durable.
        do {
            try PersistentDefaults.syncDirectory(containing: path)
        } catch {
            throw CommandFailure(.unavailable, "wrote \(path) but cannot sync its directory: \(error)")
        }
    }
}

extension Verb {
    /// `export`
    public static let export = Verb(ExportVerb.self)
}

extension Command {
    /// Write every key to a JSON file (`-` for standard output), types preserved.
    public static func export(database: String, file: String) -> Command {
        Command(ExportVerb(database: database, file: file))
    }
}
