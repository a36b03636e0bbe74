/// The 64-bit FNV-1a hash of a byte sequence: a few instructions a byte, no allocation. The
/// wake-up channel's key bits (part of the `notify` file's protocol, so fixed) and the write
/// transaction's name index (seeded per process) both use it.
enum FNV1a {
    /// FNV-1a's offset basis: the start of the hash that the `notify` file's key bits use.
    static let offsetBasis: UInt64 = 0xcbf2_9ce4_8422_2325

    /// The hash of `bytes`, starting from `basis`.
    @inline(__always)
    static func hash(_ bytes: some Sequence<UInt8>, from basis: UInt64 = offsetBasis) -> UInt64 {
        var hash = basis
        for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return hash
    }
}
