/// The `--name value` options of a reliability driver, parsed once; each typed read throws for a
/// value that does not parse or is out of range, which the driver reports as a usage error.
///
/// ```swift
/// let options = try DriverOptions(["--kills", "20"], names: ["--kills", "--dir"])
/// let kills = try options.number("--kills", default: 500, atLeast: 1)  // 20
/// let directory = options.text("--dir")  // nil
/// ```
public struct DriverOptions: Sendable {
    /// An option that is unknown, lacks its value, or has a value that is not allowed.
    public struct Invalid: Error, Sendable {
        /// The option's name.
        public var name: String
    }

    private var values: [String: String] = [:]

    /// Reads `arguments` as `--name value` pairs, every name one of `names`.
    public init(_ arguments: [String], names: Set<String>) throws(Invalid) {
        var rest = arguments[...]
        while let name = rest.popFirst() {
            guard names.contains(name), let value = rest.popFirst() else { throw Invalid(name: name) }
            values[name] = value
        }
    }

    /// The option's text; nil when it is absent.
    public func text(_ name: String) -> String? { values[name] }

    /// The option as a number of at least `minimum`; nil when it is absent.
    public func number<N: LosslessStringConvertible & Comparable>(
        _ name: String, atLeast minimum: N
    ) throws(Invalid) -> N? {
        guard let text = values[name] else { return nil }
        guard let number = N(text), number >= minimum else { throw Invalid(name: name) }
        return number
    }

    /// The option as a number of at least `minimum`; `fallback` when it is absent.
    public func number<N: LosslessStringConvertible & Comparable>(
        _ name: String, default fallback: N, atLeast minimum: N
    ) throws(Invalid) -> N {
        try number(name, atLeast: minimum) ?? fallback
    }

    /// The option as one of `C`'s cases, named by raw value; `fallback` when it is absent.
    public func choice<C: RawRepresentable>(_ name: String, default fallback: C) throws(Invalid) -> C
    where C.RawValue == String {
        guard let text = values[name] else { return fallback }
        guard let choice = C(rawValue: text) else { throw Invalid(name: name) }
        return choice
    }
}
