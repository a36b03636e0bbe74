import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// What the decoding of `Frame` runs, set per test.
private let frameDecodingHook = Guarded<(@Sendable () -> Void)?>(nil)

/// An Equatable Codable type (stored as JSON) whose decoding runs `frameDecodingHook`.
private struct Frame: Codable, Equatable, Sendable {
    var x: Int
    init(x: Int) { self.x = x }
    init(from decoder: any Decoder) throws {
        frameDecodingHook.withLock { $0 }?()
        x = try decoder.singleValueContainer().decode(Int.self)
    }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(x)
    }
}

/// A Codable type's `init(from:)` is the user's code, which may write the store (README). A
/// `set` of an Equatable one decoded the stored value inside its write transaction, to tell an
/// equal value stored in other bytes (JSON has no fixed order): there the decoder's write threw
/// `nestedWrite`, and in a group commit it ran under LMDB's writer lock for other threads' writes.
/// Both tests failed before the fix (3 of 3 runs).
@Suite(.serialized) struct SetDecodingOutsideTransactionTests {
    fileprivate static let frame = PersistentDefaults.Key<Frame>("frame", default: Frame(x: 0))
    static let decodes = PersistentDefaults.Key<Int>("decodes", default: 0)

    /// Sets `frame` from `threads` threads at once while each decoding of a `Frame` increments
    /// `decodes` in a write of its own: no set, and no write of a decoder, may fail.
    private func setWhileDecodingWrites(threads: Int) throws {
        try withTemporaryStore { store, _, log throws in
            try store.set(Frame(x: 1), for: Self.frame)
            let errors = Guarded<[String]>([])
            frameDecodingHook.withLock {
                $0 = {
                    do {
                        try store.write { $0[Self.decodes] += 1 }
                    } catch {
                        errors.withLock { $0.append("\(error)") }
                    }
                }
            }
            DispatchQueue.concurrentPerform(iterations: threads) { index in
                do {
                    try store.set(Frame(x: 2 + index), for: Self.frame)
                } catch {
                    errors.withLock { $0.append("\(error)") }
                }
            }
            frameDecodingHook.withLock { $0 = nil }
            #expect(errors.withLock { $0 } == [])
            #expect(store[Self.decodes] >= 1, "the decoder ran")
            #expect((2..<2 + threads).contains(store[Self.frame].x))
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    @Test func aDecoderThatWritesTheStoreDuringASetSucceeds() throws {
        try setWhileDecodingWrites(threads: 1)
    }

    @Test func decodersThatWriteDuringConcurrentDurableSetsSucceed() throws {
        try setWhileDecodingWrites(threads: 8)
    }
}
