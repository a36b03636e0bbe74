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

    /// The seed of ``seededHash(_:)``: random per process.
    private static let seed = UInt64.random(in: 1...UInt64.max)

    /// FNV-1a of the bytes from the process's random seed, its high half folded into the low
    /// one: for hash tables whose keys come from outside (a write transaction's name index), so
    /// that names chosen to collide cannot be prepared in advance.
    static func seededHash(_ bytes: some Sequence<UInt8>) -> UInt64 {
        let hash = hash(bytes, from: seed)
        return hash ^ (hash >> 29)
    }
}
