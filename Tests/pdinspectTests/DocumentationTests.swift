import Foundation
import PersistentDefaults
import Testing

@testable import PDInspectCore

/// The help, the manual (`docs/pdinspect.md`) and every `pdinspect` command shown in the README
/// and `docs/` agree with the verb registry (`Verb.allCases`) and the library's tag list
/// (`StoredValue.Tag`), so neither can drift from the code.
@Suite("pdinspect help and manual")
struct DocumentationTests {
    /// The repository's root: the nearest directory above this file that holds `Package.swift`.
    static let root: URL = {
        var directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while !FileManager.default.fileExists(atPath: directory.appendingPathComponent("Package.swift").path),
            directory.path != "/"
        {
            directory.deleteLastPathComponent()
        }
        return directory
    }()

    static func text(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    /// A Markdown table: a heading row, the separator, then one line per row.
    static func markdownTable(_ heading: [String], _ rows: [[String]]) -> String {
        let lines = [heading, heading.map { _ in "---" }] + rows
        return lines.map { "| " + $0.joined(separator: " | ") + " |\n" }.joined()
    }

    /// The manual's verb table, as it must read: one row per registered verb, in order.
    static var verbTable: String {
        markdownTable(
            ["verb", "arguments", "what it does"],
            Verb.allCases.map { ["`\($0.rawValue)`", "`\($0.synopsis)`", $0.summary] })
    }

    /// The manual's type table, as it must read: one row per tag of the library.
    static var typeTable: String {
        markdownTable(
            ["type", "tag", "`set … --type T` reads VALUE as"],
            StoredValue.Tag.allCases.map { tag in
                [
                    "`\(tag)`", "`0x" + String(tag.rawValue, radix: 16, uppercase: true).leftPadded(to: 2) + "`",
                    tag.textForm?.syntax ?? "(not accepted: the stored nil of an optional key)",
                ]
            })
    }

    @Test func theManualListsEveryVerbAndEveryType() throws {
        let manual = try Self.text("docs/pdinspect.md")
        // Compared outside #expect, which would print the whole manual on a failure.
        let hasVerbTable = manual.contains(Self.verbTable)
        let hasTypeTable = manual.contains(Self.typeTable)
        #expect(hasVerbTable, "docs/pdinspect.md should hold this verb table:\n\(Self.verbTable)")
        #expect(hasTypeTable, "docs/pdinspect.md should hold this type table:\n\(Self.typeTable)")
    }

    @Test func theManualListsEveryExitCode() throws {
        let manual = try Self.text("docs/pdinspect.md")
        let section = try #require(manual.components(separatedBy: "## Exit codes").dropFirst().first)
        let codes = section.split(separator: "\n").prefix { !$0.hasPrefix("#") }.compactMap { line -> Int32? in
            guard line.hasPrefix("| ") else { return nil }
            return Int32(line.dropFirst(2).prefix { $0 != " " })
        }
        #expect(codes == ExitCode.allCases.map(\.rawValue))
    }

    @Test func theHelpListsEveryVerbAndEveryType() throws {
        let listed = HelpText.overview.split(separator: "\n").compactMap { line -> String? in
            guard line.hasPrefix("  "), !line.hasPrefix("   ") else { return nil }
            return line.dropFirst(2).split(separator: " ").first.map(String.init)
        }
        let exitCodes = ExitCode.allCases.map { "\($0.rawValue)" }
        #expect(listed.filter { !exitCodes.contains($0) } == Verb.allCases.map(\.rawValue))
        let help = HelpText.help(for: .set)
        let settable = StoredValue.Tag.allCases.filter { $0 != .null }
        #expect(StoredValue.Tag.settable == settable)
        #expect(help.contains("the value's type: " + settable.map(\.description).joined(separator: ", ") + "\n"))
        for tag in settable {
            let syntax = try #require(tag.textForm?.syntax)
            let line = help.split(separator: "\n").first { $0.hasPrefix("  \(tag) ") }
            #expect(line?.hasSuffix(" " + syntax) == true, "set --help should say how it reads a \(tag)")
        }
    }

    /// A command shown in the documentation, with what the documentation shows after it.
    struct ShownCommand: CustomTestStringConvertible {
        var file: String
        var arguments: [String]
        var output: [String]
        var testDescription: String { "\(file): pdinspect " + arguments.joined(separator: " ") }
    }

    /// Every `pdinspect` command line in a code block of the README and of `docs/`.
    static var shownCommands: [ShownCommand] {
        get throws {
            let documents = try FileManager.default.contentsOfDirectory(
                atPath: root.appendingPathComponent("docs").path
            )
            .filter { $0.hasSuffix(".md") }.sorted().map { "docs/" + $0 }
            return try (["README.md"] + documents).flatMap { file in commands(in: try text(file), file: file) }
        }
    }

    static func commands(in text: String, file: String) -> [ShownCommand] {
        var commands: [ShownCommand] = []
        var inCode = false
        var pending = ""
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.hasPrefix("```") {
                inCode.toggle()
                continue
            }
            guard inCode else { continue }
            if !pending.isEmpty {
                pending += " " + line.trimmingCharacters(in: .whitespaces)
            } else {
                let prompt = line.hasPrefix("$ ") ? String(line.dropFirst(2)) : line
                if prompt.hasPrefix("pdinspect ") {
                    pending = prompt
                } else if line.hasPrefix("$ ") {
                    continue
                } else {
                    commands.indices.last.map { commands[$0].output.append(line) }
                    continue
                }
            }
            if pending.hasSuffix("\\") {
                pending.removeLast()
                continue
            }
            commands.append(ShownCommand(file: file, arguments: Array(shellWords(pending).dropFirst()), output: []))
            pending = ""
        }
        return commands
    }

    /// The words of a shell command line: quotes removed, up to a comment, `&` or `|`.
    static func shellWords(_ line: String) -> [String] {
        var words: [String] = []
        var word: String?
        var quote: Character?
        for character in line {
            if let open = quote {
                if character == open { quote = nil } else { word?.append(character) }
                continue
            }
            switch character {
            case "'", "\"":
                quote = character
                word = word ?? ""
            case " ", "\t":
                if let finished = word { words.append(finished) }
                word = nil
            case "#" where word == nil, "&", "|":
                if let finished = word { words.append(finished) }
                return words
            default:
                word = (word ?? "") + String(character)
            }
        }
        if let finished = word { words.append(finished) }
        return words
    }

    @Test func everyShownCommandParsesOrShowsItsUsageError() throws {
        let commands = try Self.shownCommands
        #expect(commands.count > 30)
        // `pdinspect VERB --help` and the like stand for any verb.
        for command in commands where !(command.arguments.first?.allSatisfy(\.isUppercase) ?? false) {
            do {
                _ = try CommandParser.parse(command.arguments)
            } catch {
                // The documentation shows a refused command with the line pdinspect prints.
                #expect(
                    command.output.contains("pdinspect: \(error.description)"),
                    "\(command.testDescription) is refused: \(error.description)")
            }
        }
    }

    @Test func theShellWordsOfACommandLine() {
        #expect(
            Self.shellWords(#"pdinspect set s j '{"x": 1}' --type json # comment"#)
                == ["pdinspect", "set", "s", "j", #"{"x": 1}"#, "--type", "json"])
        #expect(Self.shellWords("pdinspect watch s launchCount &") == ["pdinspect", "watch", "s", "launchCount"])
        #expect(Self.shellWords(#"pdinspect get s "" "#) == ["pdinspect", "get", "s", ""])
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}
