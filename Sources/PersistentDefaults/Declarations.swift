import Foundation

/// What a declaration records of a key's value type; see `Keys.declaredForm()`.
struct DeclaredForm: Equatable {
    /// The tag a non-nil value is stored with.
    var type: StoredValue.Tag
    /// The width of a type narrower than the tag (see ``KeyDeclaration/bitWidth``).
    var bitWidth: Int?
    /// Whether `null` (tag `0x00`) is a value of the key.
    var isOptional: Bool
    /// The default, encoded as it would be stored.
    var encodedDefault: [UInt8]
}

/// A key as the code declared it with `PersistentDefaults.declare(_:)`: its name, the
/// type its values are stored as, its default and an optional one-line summary, kept in the
/// store's `meta` database so that tools such as `pdinspect` can show and enforce them.
///
/// ```swift
/// if let declaration = try store.declaration(named: "maxConnections") {
///     print(declaration.typeName, try declaration.defaultValue(), declaration.summary ?? "")
/// }
/// ```
public struct KeyDeclaration: Sendable, Equatable, CustomStringConvertible {
    /// The key's name.
    public let name: String
    /// The tag a non-nil value of the key is stored with (`int`, `string`, `json` …; see
    /// ``StoredValue/Tag``). A `RawRepresentable` type has its raw value's tag, an optional its
    /// wrapped type's tag, a key with a ``ValueConversion`` its stored type's tag; ``bitWidth``
    /// tells a narrower type (`Int8`, `Float`) from the tag's full width.
    public let type: StoredValue.Tag
    /// The bit width of the key's type when it holds less than its tag's 64 bits: 8, 16 or 32 for
    /// an `int` or `uint` key (`Int8`, `UInt16`, `Int32` …), 32 for a `double` key of type
    /// `Float`. Nil for a type of the tag's full width (`Int`, `UInt64`, `Double`), for the other
    /// tags, and for a declaration recorded before widths were (it reads as the full width).
    ///
    /// ```swift
    /// try store.declare(PersistentDefaults.Key<Int8>("level", default: 0))
    /// try store.declaration(named: "level")?.bitWidth   // 8; typeName "int8"
    /// ```
    public let bitWidth: Int?
    /// Whether the key's type is optional, so that a stored `null` is a value of it.
    public let isOptional: Bool
    /// The default as it would be stored: the type tag, then the payload.
    public let encodedDefault: [UInt8]
    /// The one-line summary given with the declaration, if any.
    public let summary: String?
    /// The commit that recorded this declaration: its log record has no value changes.
    public let sequence: UInt64
    /// When the declaration was recorded.
    public let date: Date
    /// The process that recorded it.
    public let processID: Int32

    init(name: String, form: DeclaredForm, summary: String?, sequence: UInt64, date: Date, processID: Int32) {
        self.name = name
        type = form.type
        bitWidth = form.bitWidth
        isOptional = form.isOptional
        encodedDefault = form.encodedDefault
        self.summary = summary
        self.sequence = sequence
        self.date = date
        self.processID = processID
    }

    var form: DeclaredForm {
        DeclaredForm(type: type, bitWidth: bitWidth, isOptional: isOptional, encodedDefault: encodedDefault)
    }

    /// The type as `pdinspect` prints it: the tag's name, with the width of a narrower type
    /// (`int8`, `uint32`; `float` for a `double` key of 32 bits) and `?` for an optional type
    /// (`string?`, `uint16?`).
    public var typeName: String {
        let name =
            switch (type, bitWidth) {
            case (.double, 32?): "float"
            case (_, let bits?): "\(type)\(bits)"
            case (_, nil): "\(type)"
            }
        return isOptional ? name + "?" : name
    }

    /// The default, decoded.
    public func defaultValue() throws(StoredValueError) -> StoredValue {
        try StoredValue(encodedValue: encodedDefault)
    }

    /// `name: type = default — summary`.
    public var description: String {
        let value = (try? defaultValue()).map { "\($0.jsonText)" } ?? "<\(encodedDefault.count) bytes>"
        return "\(name): \(typeName) = \(value)" + (summary.map { " — \($0)" } ?? "")
    }

    /// Whether `value` decodes as the declared type, by the rules the library reads with:
    /// numbers convert between `int`, `uint` and `double` when nothing is lost and the number fits
    /// the declared width (an `int8` key admits -128…127, a `float` key a double that a `Float`
    /// holds: not 1e300, not 1e-50), a `date` also
    /// reads a `double` (seconds since 1970), a `url` or `uuid` a `string` that parses as one,
    /// a `json` key any value whose JSON form parses, and `null` only an optional key.
    public func admits(_ value: StoredValue) -> Bool { mismatch(of: value) == nil }

    /// Why `value` does not decode as the declared type; nil when it does (see ``admits(_:)``).
    public func mismatch(of value: StoredValue) -> String? {
        let admitted: Bool =
            switch (type, value) {
            case (_, .null): isOptional
            case (.bool, .bool), (.string, .string), (.data, .data), (.url, .url), (.uuid, .uuid): true
            case (.int, .int), (.int, .uint), (.int, .double), (.uint, .int), (.uint, .uint), (.uint, .double),
                (.double, .int), (.double, .uint), (.double, .double):
                form.readsAsNumber(value)
            case (.date, .date), (.date, .double): true
            case (.url, .string(let text)): URL(string: text) != nil
            case (.uuid, .string(let text)): UUID(uuidString: text) != nil
            case (.json, _): Self.parses(value.jsonText)
            default: false
            }
        guard !admitted else { return nil }
        let shown = value.jsonText.count > 60 ? String(value.jsonText.prefix(60)) + "…" : value.jsonText
        return "stored \(value.tag) \(shown) does not decode as the declared type \(typeName)"
    }

    /// The range of the declared type when it is narrower than its tag (`-128…127` for `int8`,
    /// `±3.4028235e+38` for `float`); nil otherwise. For `pdinspect set`'s refusal.
    package var rangeDescription: String? {
        switch (type, bitWidth) {
        case (.int, let bits?): "\(-(Int64(1) << (bits - 1)))…\((Int64(1) << (bits - 1)) - 1)"
        case (.uint, let bits?): "0…\((UInt64(1) << bits) - 1)"
        case (.double, 32?): "±\(Float.greatestFiniteMagnitude)"
        default: nil
        }
    }

    private static func parses(_ json: String) -> Bool {
        (try? JSONSerialization.jsonObject(with: Data(json.utf8), options: .fragmentsAllowed)) != nil
    }

    /// Whether both declarations have the same name (by its UTF-8 bytes) and the same fields.
    public static func == (lhs: KeyDeclaration, rhs: KeyDeclaration) -> Bool {
        lhs.name.utf8.elementsEqual(rhs.name.utf8) && lhs.form == rhs.form && lhs.summary == rhs.summary
            && lhs.sequence == rhs.sequence && lhs.date == rhs.date && lhs.processID == rhs.processID
    }
}

extension DeclaredForm {
    /// Whether the numeric `value` reads as the declared type, by that type's own conversion
    /// (`init(stored:)`, what a key's read runs): without loss, and within the type's width.
    func readsAsNumber(_ value: StoredValue) -> Bool {
        func reads<Number: PrimitiveStorable>(_: Number.Type) -> Bool {
            (try? Number(stored: value)) != nil
        }
        return switch (type, bitWidth) {
        case (.int, 8?): reads(Int8.self)
        case (.int, 16?): reads(Int16.self)
        case (.int, 32?): reads(Int32.self)
        case (.int, _): reads(Int64.self)
        case (.uint, 8?): reads(UInt8.self)
        case (.uint, 16?): reads(UInt16.self)
        case (.uint, 32?): reads(UInt32.self)
        case (.uint, _): reads(UInt64.self)
        case (.double, 32?): reads(Float.self)
        case (.double, _): reads(Double.self)
        default: false
        }
    }

    /// Whether `bits` is a width recorded for a key of `tag` (what ``readsAsNumber(_:)`` knows).
    static func isValid(bitWidth bits: Int, for tag: StoredValue.Tag) -> Bool {
        switch tag {
        case .int, .uint: [8, 16, 32].contains(bits)
        case .double: bits == 32
        default: false
        }
    }
}

extension PersistentDefaults {
    /// Records each key's name, stored type and default in the store, so that `pdinspect` shows
    /// them and refuses values of another type: the code's schema, visible to operators.
    ///
    /// ```swift
    /// try store.declare(.launchCount, .theme, .frame)
    /// ```
    ///
    /// Call it at every start: declaring what is already declared the same way reads the store
    /// and writes nothing. Declarations that differ (another type, another default: a
    /// migration) replace the recorded ones, all in one logged commit whose record has no value
    /// changes, so key observers are not called. A summary recorded earlier with
    /// ``declare(_:summary:)-(Keys,_)`` is kept.
    ///
    /// Throws ``PersistentDefaultsError/invalidDeclaration(key:reason:)`` for a name longer than
    /// ``maximumDeclaredNameLength`` bytes or a key given twice with different types,
    /// ``PersistentDefaultsError/invalidKeyName(_:reason:)`` and
    /// ``PersistentDefaultsError/encodingFailed(key:type:reason:)`` (a default that cannot be
    /// encoded); then nothing is recorded.
    public func declare(_ keys: Keys...) throws {
        try declare(keys, summary: nil)
    }

    /// Declares every key of `keys`; see `declare(_:)` (variadic).
    public func declare(_ keys: [Keys]) throws {
        try declare(keys, summary: nil)
    }

    /// Declares one key with a one-line summary for operators; an empty summary removes the
    /// recorded one. See `declare(_:)` (variadic).
    ///
    /// ```swift
    /// try store.declare(.maxConnections, summary: "Upper bound on open client connections")
    /// ```
    public func declare(_ key: Keys, summary: String) throws {
        try declare([key], summary: summary)
    }

    /// Declares a key type (see ``PersistentDefaultsKey``), with an optional one-line summary.
    public func declare<K: PersistentDefaultsKey>(_ key: K, summary: String? = nil) throws
    where K.Conversion.Stored: Codable {
        try declare([K.key], summary: summary)
    }

    /// The longest key name that can be declared, in UTF-8 bytes: LMDB's key limit (511) less the
    /// 9 bytes of the `declared/` prefix of the meta key.
    public static let maximumDeclaredNameLength = Keys.maximumNameLength - StoreCore.declarationPrefix.count

    /// Every declaration recorded in the store, sorted by the names' UTF-8 bytes.
    public func declarations() throws -> [KeyDeclaration] {
        try core.environment.withRead { try core.declarations(in: $0) }
    }

    /// The declaration of the key named `name`; nil when it was never declared.
    public func declaration(named name: String) throws -> KeyDeclaration? {
        try core.environment.withRead { try core.declaration(named: Array(name.utf8), in: $0) }
    }

    /// The newest commit-log record that changed the key named `name` (by its UTF-8 bytes); nil
    /// when no record still kept did (see ``Options/logRetention``). What `pdinspect describe`
    /// shows as the last change.
    public func newestCommit(changing name: String) throws -> CommitRecord? {
        try core.environment.withRead { try core.newestCommit(changing: Array(name.utf8), in: $0) }
    }

    func declare(_ keys: [Keys], summary: String?) throws {
        var wanted: [(key: Keys, form: DeclaredForm)] = []
        for key in keys {
            try key.validate()
            guard key.nameBytes.count <= Self.maximumDeclaredNameLength else {
                throw PersistentDefaultsError.invalidDeclaration(
                    key: key.name,
                    reason: "the name has \(key.nameBytes.count) UTF-8 bytes; a declared name has at most "
                        + "\(Self.maximumDeclaredNameLength)")
            }
            let form = try key.declaredForm()
            if let earlier = wanted.first(where: { $0.key.nameBytes == key.nameBytes }) {
                guard earlier.form == form else {
                    throw PersistentDefaultsError.invalidDeclaration(
                        key: key.name, reason: "given twice in one call with different types or defaults")
                }
                continue
            }
            wanted.append((key, form))
        }
        if let summary, let key = wanted.first, summary.contains(where: \.isNewline) {
            throw PersistentDefaultsError.invalidDeclaration(
                key: key.key.name, reason: "a summary is one line, and this one has a line break")
        }
        /// The declarations that differ from those recorded in `transaction`, with their summary.
        func changed(in transaction: Transaction) throws -> [(key: Keys, form: DeclaredForm, summary: String?)] {
            try wanted.compactMap { entry in
                // A recorded declaration that no longer decodes (another tool wrote it) is replaced.
                let recorded: KeyDeclaration?
                do {
                    recorded = try core.declaration(named: entry.key.nameBytes, in: transaction)
                } catch PersistentDefaultsError.decodingFailed {
                    recorded = nil
                }
                // No summary given keeps the recorded one; an empty one removes it.
                let newSummary = summary.map { $0.isEmpty ? nil : $0 } ?? recorded?.summary
                if let recorded, recorded.form == entry.form, recorded.summary == newSummary { return nil }
                return (entry.key, entry.form, newSummary)
            }
        }
        // The common case, every start of an app: all declared already; a read, no write.
        guard !wanted.isEmpty, try !core.environment.withRead({ try changed(in: $0) }).isEmpty else { return }
        try write { writer in
            let transaction = try writer.live()
            let entries = try changed(in: transaction)
            guard !entries.isEmpty else { return }
            // The record `finish` appends takes the next sequence number in this transaction.
            let sequence = try core.lastSequence(in: transaction) + 1
            let date = Date()
            for entry in entries {
                let declaration = KeyDeclaration(
                    name: entry.key.name, form: entry.form, summary: entry.summary, sequence: sequence, date: date,
                    processID: getpid())
                try core.record(declaration, nameBytes: entry.key.nameBytes, in: transaction)
            }
            writer.logsWithoutValueChanges = true
        }
    }
}

/// A declaration's value in the `meta` database, as JSON with sorted keys.
private struct DeclarationRecord: Codable {
    var type: String
    /// ``KeyDeclaration/bitWidth``; absent for the tag's full width, and in records written
    /// before widths were.
    var bits: Int?
    var optional: Bool
    /// The encoded default (tag and payload), base64.
    var defaultValue: String
    var summary: String?
    var sequence: UInt64
    /// Seconds since 2001-01-01 (`JSONEncoder`'s default).
    var date: Date
    var processID: Int32

    enum CodingKeys: String, CodingKey {
        case type, bits, optional, summary, sequence, date, processID
        case defaultValue = "default"
    }
}

extension Snapshot {
    /// ``PersistentDefaults/newestCommit(changing:)`` as this snapshot sees it: with the other
    /// reads of the snapshot, one commit's state (`pdinspect describe`).
    package func newestCommit(changing name: String) throws -> CommitRecord? {
        try core.newestCommit(changing: Array(name.utf8), in: try live())
    }
}

extension StoreCore {
    /// The newest record in `transaction`'s log that changed the key named `nameBytes`.
    func newestCommit(changing nameBytes: [UInt8], in transaction: Transaction) throws -> CommitRecord? {
        var found: CommitRecord?
        try transaction.forEach(databases.log, reverse: true) { key, value in
            let record = try CommitRecord(sequence: try logSequence(fromKey: key), bytes: value)
            guard record.changes.contains(where: { $0.key.utf8.elementsEqual(nameBytes) }) else { return true }
            found = record
            return false
        }
        return found
    }
}

extension StoreCore {
    /// Meta keys of declarations: this prefix, then the key name's UTF-8 bytes.
    static let declarationPrefix = Array("declared/".utf8)

    private static let declarationEncoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// Writes `declaration` under its meta key.
    func record(_ declaration: KeyDeclaration, nameBytes: [UInt8], in transaction: Transaction) throws {
        let record = DeclarationRecord(
            type: declaration.type.description, bits: declaration.bitWidth, optional: declaration.isOptional,
            defaultValue: Data(declaration.encodedDefault).base64EncodedString(), summary: declaration.summary,
            sequence: declaration.sequence, date: declaration.date, processID: declaration.processID)
        let encoded = Array(try Self.declarationEncoder.encode(record))
        try (Self.declarationPrefix + nameBytes).withUnsafeBytes { key in
            try encoded.withUnsafeBytes { try transaction.put(databases.meta, key, $0) }
        }
    }

    /// The declaration of the name with `nameBytes`; nil when there is none.
    func declaration(named nameBytes: [UInt8], in transaction: Transaction) throws -> KeyDeclaration? {
        let key = Self.declarationPrefix + nameBytes
        guard key.count <= PersistentDefaults.Keys.maximumNameLength else { return nil }
        return try key.withUnsafeBytes { key in
            try transaction.withValue(databases.meta, key) { value in
                try value.map { try Self.decodeDeclaration(nameBytes: nameBytes, value: $0) }
            }
        }
    }

    /// Every declaration, sorted by name bytes; the first malformed one throws.
    func declarations(in transaction: Transaction) throws -> [KeyDeclaration] {
        var declarations: [KeyDeclaration] = []
        try forEachDeclaration(in: transaction) { declarations.append(try $0.get()) }
        return declarations
    }

    /// Passes every declaration, or the error of one that does not decode, in name order.
    func forEachDeclaration(
        in transaction: Transaction, _ body: (Result<KeyDeclaration, PersistentDefaultsError>) throws -> Void
    ) throws {
        try Self.declarationPrefix.withUnsafeBytes { start in
            try transaction.forEach(databases.meta, from: start) { key, value in
                guard key.starts(with: Self.declarationPrefix) else { return false }
                let nameBytes = Array(key.dropFirst(Self.declarationPrefix.count))
                let result: Result<KeyDeclaration, PersistentDefaultsError>
                do throws(PersistentDefaultsError) {
                    result = .success(try Self.decodeDeclaration(nameBytes: nameBytes, value: value))
                } catch {
                    result = .failure(error)
                }
                try body(result)
                return true
            }
        }
    }

    private static func decodeDeclaration(nameBytes: [UInt8], value: UnsafeRawBufferPointer)
        throws(PersistentDefaultsError) -> KeyDeclaration
    {
        let name = String(decoding: nameBytes, as: UTF8.self)
        func failure(_ reason: String) -> PersistentDefaultsError {
            .decodingFailed(key: name, type: "KeyDeclaration", reason: "the declaration in meta: \(reason)")
        }
        let record: DeclarationRecord
        do {
            record = try JSONCoding.decoder.decode(DeclarationRecord.self, from: Data(value))
        } catch {
            throw failure("not a declaration record (\(error))")
        }
        guard let tag = StoredValue.Tag.allCases.first(where: { $0.description == record.type }), tag != .null else {
            throw failure("unknown type \"\(record.type)\"")
        }
        if let bits = record.bits, !DeclaredForm.isValid(bitWidth: bits, for: tag) {
            throw failure("\(bits) bits is not a width of a \(tag) key")
        }
        guard let encodedDefault = Data(base64Encoded: record.defaultValue) else {
            throw failure("the default is not base64")
        }
        return KeyDeclaration(
            name: name,
            form: DeclaredForm(
                type: tag, bitWidth: record.bits, isOptional: record.optional, encodedDefault: Array(encodedDefault)),
            summary: record.summary, sequence: record.sequence, date: record.date, processID: record.processID)
    }
}
