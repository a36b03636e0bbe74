extension FixedWidthInteger where Self: UnsignedInteger {
    /// The integer whose big-endian bytes (most significant first) are `bytes`, as the store
    /// writes every integer: log keys, record fields, value payloads, the format version.
    ///
    /// Callers check the count first: fewer bytes than the type's size are its low bytes, and of
    /// more bytes the leading ones are shifted out.
    @inline(__always)
    package init(bigEndianBytes bytes: some Sequence<UInt8>) {
        var value = Self.zero
        for byte in bytes { value = value << 8 | Self(byte) }
        self = value
    }
}
