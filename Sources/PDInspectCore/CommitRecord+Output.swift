import PersistentDefaults

/// How `log` and `watch` show one change of a commit record.
extension CommitRecord.Change {
    /// Table cells: the key, then its type and value, `removed`, or `invalid` and why.
    var row: [String] {
        do throws(StoredValueError) {
            guard let value = try storedValue() else { return [TextTable.cell(key), "removed"] }
            return [TextTable.cell(key), value.tag.description, TextTable.cell(value.description)]
        } catch {
            return [TextTable.cell(key), "invalid", "(\(error))"]
        }
    }

    /// The type and value as JSON; nil for a removal; an undecodable value is typed `invalid`
    /// without a value.
    var typedJSON: (type: String?, value: JSONValue?) {
        guard let bytes = encodedValue else { return (nil, nil) }
        let entry = StoredEntry(name: key, encodedValue: bytes)
        guard case .success(let value) = entry.decoded,
            let data = try? JSONCoding.compact.encode(TypedValue(value)),
            case .object(let object) = try? JSONCoding.decoder.decode(JSONValue.self, from: data)
        else { return ("invalid", nil) }
        return (value.tag.description, object["value"])
    }
}
