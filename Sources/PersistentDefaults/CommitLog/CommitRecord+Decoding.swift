extension CommitRecord {
    /// Decodes a commit record from the bytes the log database keeps for it (its encoded record,
    /// in record format 1 as <doc:OnDiskFormat> describes), checking every length against the
    /// bytes present: for the decoder fuzzer and tests that hold a record's raw bytes.
    ///
    /// ```swift
    /// let record = try CommitRecord.decode(sequence: 7, encodedRecord: bytes)
    /// print(record.changedKeys)
    /// ```
    ///
    /// Throws ``PersistentDefaultsError/corruptLogRecord(sequence:reason:)`` for malformed bytes.
    package static func decode(sequence: UInt64, encodedRecord: [UInt8]) throws(PersistentDefaultsError)
        -> CommitRecord
    {
        let decoded = encodedRecord.withUnsafeBytes { bytes in
            Result { () throws(PersistentDefaultsError) in try CommitRecord(sequence: sequence, bytes: bytes) }
        }
        return try decoded.get()
    }
}
