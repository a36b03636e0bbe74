extension CommitRecord {
    /// Decodes a commit record from the bytes the log database keeps for it, checking every
    /// length against the bytes present: for tools and fuzzers that hold a record's raw bytes.
    ///
    /// ```swift
    /// let record = try CommitRecord.decode(sequence: 7, encoded: bytes)
    /// print(record.changedKeys)
    /// ```
    ///
    /// Throws ``PersistentDefaultsError/corruptLogRecord(sequence:reason:)`` for malformed bytes.
    public static func decode(sequence: UInt64, encoded: [UInt8]) throws(PersistentDefaultsError) -> CommitRecord {
        let decoded = encoded.withUnsafeBytes { bytes in
            Result { () throws(PersistentDefaultsError) in try CommitRecord(sequence: sequence, bytes: bytes) }
        }
        return try decoded.get()
    }

    /// The bytes the log database keeps for this record (its sequence number is the key), in
    /// record format 1 as <doc:OnDiskFormat> describes; ``decode(sequence:encoded:)`` reads them back.
    public var encodedBytes: [UInt8] { encoded }
}
