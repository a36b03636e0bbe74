import PersistentDefaults

extension StoredEntry {
    /// The decoded value, or why it does not decode (including JSON values that do not parse).
    var decoded: Result<StoredValue, StoredValueError> {
        do throws(StoredValueError) {
            let value = try storedValue()
            if case .json(let text) = value, JSONValue.parse(text) == nil {
                return .failure(StoredValueError("json payload does not parse as JSON"))
            }
            return .success(value)
        } catch {
            return .failure(error)
        }
    }

    /// The type name for listings: the tag, or `invalid` when the value does not decode.
    var typeName: String {
        (try? decoded.get()).map { $0.tag.description } ?? "invalid"
    }
}

extension WriteTransaction {
    /// Throws a usage failure naming the declared type when `name` is declared
    /// (`PersistentDefaults.declare`) with a type other than `value`'s, or with a type narrower
    /// than the tag that cannot hold it (1000 for an `int8` key); `null` fits an optional.
    /// For `set` and `import` without `--force`.
    func checkDeclaredType(of value: StoredValue, named name: String) throws {
        guard let declaration = try declaration(named: name), !(value == .null && declaration.isOptional) else {
            return
        }
        if value.tag != declaration.type {
            throw CommandFailure(
                .usage,
                "key \"\(name)\" is declared as \(declaration.typeName), not \(value.tag); nothing was written "
                    + "(--force stores it anyway)")
        }
        guard !declaration.admits(value) else { return }
        let range = declaration.rangeDescription.map { " (\($0))" } ?? ""
        throw CommandFailure(
            .usage,
            "key \"\(name)\" is declared as \(declaration.typeName)\(range), which does not hold \(value.jsonText); "
                + "nothing was written (--force stores it anyway)")
    }
}
