/// The named LMDB databases of a store.
struct Databases: Sendable {
    /// Key name → stored value.
    var values: DatabaseHandle
    /// Sequence number (8 bytes big-endian) → commit record.
    var log: DatabaseHandle
    /// Store facts such as the format version.
    var meta: DatabaseHandle

    static let valuesName = "values"
    static let logName = "log"
    static let metaName = "meta"
    /// Meta key holding the format version as 4 bytes big-endian.
    static let formatVersionKey = Array("format-version".utf8)
}
