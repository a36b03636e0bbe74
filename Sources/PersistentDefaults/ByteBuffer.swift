/// The capacity that storage of `capacity` elements grows to: twice as large, or towards
/// `expected` (the previous write transaction's size) by at most 64 times, so that a large
/// transaction moves its elements once or twice and a small one after a large import does not
/// allocate for the import. (`ByteBuffer`, and a write transaction's per-key tables.)
@inline(__always)
func grownCapacity(_ capacity: Int, expected: Int) -> Int { max(capacity * 2, min(expected, capacity * 64)) }

/// A growable run of bytes in memory it owns: a write transaction's values, appended a few
/// bytes at a time. `Array`'s `append` costs 60–100 instructions a call (capacity and
/// uniqueness checks, a generic copy); these appends cost a few, which for a 1,000-key
/// transaction was a sixth of its instructions (callgrind).
///
/// Bytes are only appended (or the last ones dropped); a range once appended keeps its bytes
/// until the buffer ends. Pointers into the buffer are valid only until the next append.
struct ByteBuffer: ~Copyable {
    private var base: UnsafeMutableRawPointer
    private var capacity: Int
    /// How many bytes the buffer holds.
    private(set) var count = 0
    /// How many bytes the buffer is expected to hold: a growth makes room for that many at once,
    /// up to 64 times the capacity it had.
    var expectedCapacity = 0

    init(capacity: Int = 256) {
        self.capacity = max(capacity, 16)
        base = .allocate(byteCount: self.capacity, alignment: 8)
    }

    deinit { base.deallocate() }

    /// Makes room for `more` bytes.
    @inline(__always)
    private mutating func reserve(_ more: Int) {
        guard count + more > capacity else { return }
        var grown = grownCapacity(capacity, expected: expectedCapacity)
        while grown < count + more { grown *= 2 }
        let moved = UnsafeMutableRawPointer.allocate(byteCount: grown, alignment: 8)
        moved.copyMemory(from: base, byteCount: count)
        base.deallocate()
        base = moved
        capacity = grown
    }

    /// Appends one byte.
    @inline(__always)
    mutating func append(_ byte: UInt8) {
        reserve(1)
        base.storeBytes(of: byte, toByteOffset: count, as: UInt8.self)
        count += 1
    }

    /// Appends `value` big-endian.
    @inline(__always)
    mutating func append<T: FixedWidthInteger>(bigEndian value: T) {
        let size = MemoryLayout<T>.size
        reserve(size)
        (base + count).storeBytes(of: value.bigEndian, as: T.self)
        count += size
    }

    /// Appends a fixed-width value as the store keeps it: `tag`, then `payload` big-endian, with
    /// one capacity check for the nine bytes.
    @inline(__always)
    mutating func append(tag: UInt8, payload: UInt64) {
        reserve(9)
        (base + count).storeBytes(of: tag, as: UInt8.self)
        (base + count + 1).storeBytes(of: payload.bigEndian, as: UInt64.self)
        count += 9
    }

    /// Appends the bytes of `bytes`.
    @inline(__always)
    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        reserve(bytes.count)
        if let source = bytes.baseAddress { (base + count).copySmall(from: source, count: bytes.count) }
        count += bytes.count
    }

    /// Appends the bytes of `bytes`, at once when they are contiguous.
    mutating func append(contentsOf bytes: some Collection<UInt8>) {
        if bytes.withContiguousStorageIfAvailable({ append(UnsafeRawBufferPointer($0)) }) != nil { return }
        reserve(bytes.count)
        for byte in bytes { append(byte) }
    }

    /// Drops the bytes after the first `count`.
    mutating func truncate(to count: Int) { self.count = min(count, self.count) }

    /// The bytes in `range` (within `0..<count`); valid until the next append.
    @inline(__always)
    func bytes(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + range.lowerBound, count: range.count)
    }

    /// The byte at `offset` (below `count`).
    func byte(at offset: Int) -> UInt8 { base.load(fromByteOffset: offset, as: UInt8.self) }
}
