import Foundation

/// A value type measured in the get and set cases, with the encoding each peer uses for it.
///
/// Peers that store bytes (raw LMDB, SQLite, UserDefaults for the struct) encode the struct
/// with one reused `JSONEncoder` and decode it with one reused `JSONDecoder`, as an application
/// storing Codable values through them would. An Int is stored as its 8 bytes.
protocol BenchmarkValue: Codable, Sendable {
    /// `int` or `struct`, the second part of the case names.
    static var label: String { get }
    /// A value that differs for each `index`, so that every set really writes.
    static func sample(_ index: Int) -> Self
    /// A number derived from the value, summed so reads cannot be optimised away.
    var checksum: Int { get }
    /// The bytes raw LMDB and SQLite store.
    func rawBytes(_ encoder: JSONEncoder) throws -> [UInt8]
    /// Decodes `rawBytes`.
    static func decode(raw bytes: UnsafeRawBufferPointer, _ decoder: JSONDecoder) throws -> Self
    /// Stores the value in UserDefaults the usual way.
    func store(in defaults: UserDefaults, key: String, _ encoder: JSONEncoder) throws
    /// Reads the value from UserDefaults the usual way.
    static func load(from defaults: UserDefaults, key: String, _ decoder: JSONDecoder) throws -> Self
}

extension Int: BenchmarkValue {
    static var label: String { "int" }
    static func sample(_ index: Int) -> Int { index }
    var checksum: Int { self }

    func rawBytes(_: JSONEncoder) -> [UInt8] { withUnsafeBytes(of: self) { Array($0) } }

    static func decode(raw bytes: UnsafeRawBufferPointer, _: JSONDecoder) -> Int {
        bytes.count == 8 ? bytes.loadUnaligned(as: Int.self) : 0
    }

    func store(in defaults: UserDefaults, key: String, _: JSONEncoder) { defaults.set(self, forKey: key) }

    static func load(from defaults: UserDefaults, key: String, _: JSONDecoder) -> Int {
        defaults.integer(forKey: key)
    }
}

extension WindowFrame: BenchmarkValue {
    static var label: String { "struct" }
    static func sample(_ index: Int) -> WindowFrame { WindowFrame(x: Double(index), y: 480, title: "Main window") }
    var checksum: Int { Int(x) + title.utf8.count }

    func rawBytes(_ encoder: JSONEncoder) throws -> [UInt8] { Array(try encoder.encode(self)) }

    static func decode(raw bytes: UnsafeRawBufferPointer, _ decoder: JSONDecoder) throws -> WindowFrame {
        try decoder.decode(WindowFrame.self, from: Data(bytes))
    }

    func store(in defaults: UserDefaults, key: String, _ encoder: JSONEncoder) throws {
        defaults.set(try encoder.encode(self), forKey: key)
    }

    static func load(from defaults: UserDefaults, key: String, _ decoder: JSONDecoder) throws -> WindowFrame {
        guard let data = defaults.data(forKey: key) else { return sample(0) }
        return try decoder.decode(WindowFrame.self, from: data)
    }
}

/// Keeps a computed value alive so the optimiser cannot drop the work that made it.
@inline(never)
func blackHole<T>(_ value: T) {
    withExtendedLifetime(value) {}
}

/// A unique UserDefaults suite, removed after `body`.
///
/// On Linux, `set` changes only memory until `synchronize()` writes the plist.
func withUserDefaultsSuite<R>(_ body: (UserDefaults, String) throws -> R) throws -> R {
    let suite = "pdbench-" + UUID().uuidString
    guard let defaults = UserDefaults(suiteName: suite) else {
        throw BenchmarkError.setup("UserDefaults(suiteName: \(suite)) returned nil")
    }
    defer {
        defaults.removePersistentDomain(forName: suite)
        defaults.synchronize()
    }
    return try body(defaults, suite)
}

/// A benchmark that could not be set up.
enum BenchmarkError: Error, CustomStringConvertible {
    case setup(String)
    var description: String {
        switch self {
        case .setup(let reason): "setup failed: \(reason)"
        }
    }
}
