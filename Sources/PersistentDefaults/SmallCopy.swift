#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension UnsafeMutableRawPointer {
    /// Copies `count` bytes from `source` (the two must not overlap). 4 to 16 bytes — a value
    /// of a primitive type, most key names — are copied as two overlapping loads and stores,
    /// without a `memcpy` call, which costs ~30 instructions for a few bytes (callgrind: the
    /// names and values of a 1,000-key transaction).
    @inline(__always)
    func copySmall(from source: UnsafeRawPointer, count: Int) {
        if count >= 8, count <= 16 {
            let head = source.loadUnaligned(as: UInt64.self)
            let tail = source.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self)
            storeBytes(of: head, as: UInt64.self)
            storeBytes(of: tail, toByteOffset: count - 8, as: UInt64.self)
        } else if count >= 4, count < 8 {
            let head = source.loadUnaligned(as: UInt32.self)
            let tail = source.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)
            storeBytes(of: head, as: UInt32.self)
            storeBytes(of: tail, toByteOffset: count - 4, as: UInt32.self)
        } else {
            copyMemory(from: source, byteCount: count)
        }
    }
}

extension UnsafeRawPointer {
    /// Whether the `count` bytes here equal those at `other`; 4 to 16 bytes compared as two
    /// overlapping loads each, without a `memcmp` call (see `copySmall(from:count:)`).
    @inline(__always)
    func bytesEqual(_ other: UnsafeRawPointer, count: Int) -> Bool {
        if count >= 8, count <= 16 {
            return loadUnaligned(as: UInt64.self) == other.loadUnaligned(as: UInt64.self)
                && loadUnaligned(fromByteOffset: count - 8, as: UInt64.self)
                    == other.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self)
        }
        if count >= 4, count < 8 {
            return loadUnaligned(as: UInt32.self) == other.loadUnaligned(as: UInt32.self)
                && loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)
                    == other.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)
        }
        return memcmp(self, other, count) == 0
    }
}
