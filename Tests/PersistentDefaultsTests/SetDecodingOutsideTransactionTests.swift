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

/// A key type for the same stored key as `frame`: its hooks compare values.
private struct FrameKey: CodableDefaultsKey {
    static let defaultValue = Frame(x: 0)
}

extension PersistentDefaultsKey where Self == FrameKey {
    fileprivate static var frameType: Self { Self() }
}

/// A key type that keeps the highest `x` set.
private struct RisingFrameKey: PersistentDefaultsKey {
    static let defaultValue = Frame(x: 0)
    static func shouldOverwrite(_ oldValue: Frame, _ newValue: Frame) -> Bool { newValue.x > oldValue.x }
}

extension PersistentDefaultsKey where Self == RisingFrameKey {
    fileprivate static var risingFrame: Self { Self() }
}

/// A Codable type's `init(from:)` is the user's code, which may write the store (README). A
/// `set` of an Equatable one decoded the stored value inside its write transaction, to tell an
/// equal value stored in other bytes (JSON has no fixed order): there the decoder's write threw
/// `nestedWrite`, and in a group commit it ran under LMDB's writer lock for other threads' writes.
/// Both tests failed before the fix (3 of 3 runs).
@Suite(.serialized) struct SetDecodingOutsideTransactionTests {
    fileprivate static let frame = PersistentDefaults.Key<Frame>("frame", default: Frame(x: 0))
    static let decodes = PersistentDefaults.Key<Int>("decodes", default: 0)

    /// Sets `frame` from `threads` threads at once (with `set`, by default the key's own) while
    /// each decoding of a `Frame` increments `decodes` in a write of its own: no set, and no
    /// write of a decoder, may fail.
    private func setWhileDecodingWrites(
        threads: Int,
        set: @Sendable (PersistentDefaults, Frame) throws -> Void = { try $0.set($1, for: Self.frame) }
    ) throws {
        try withTemporaryStore { store, _, log throws in
            // Stored by a transaction, which the next set does not know the value of: it decodes.
            try store.write { $0[Self.frame] = Frame(x: 1) }
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
                    try set(store, Frame(x: 2 + index))
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

    /// A key type's `shouldOverwrite` hook compares with the stored value: its set decoded that
    /// value — the conversion and the type's `init(from:)` — inside the write transaction, where
    /// the decoder's write threw `nestedWrite` (1 of 1 set; with 8 threads, in every run), and
    /// ran the hooks there, under LMDB's writer lock, for other threads' sets of a group commit.
    @Test func aKeyTypesDecoderThatWritesTheStoreDuringASetSucceeds() throws {
        try setWhileDecodingWrites(threads: 1) { try $0.set($1, for: .frameType) }
    }

    @Test func keyTypeDecodersThatWriteDuringConcurrentDurableSetsSucceed() throws {
        try setWhileDecodingWrites(threads: 8) { try $0.set($1, for: .frameType) }
    }

    /// The hooks are asked before the transaction, about the bytes stored then: when a commit
    /// changes them in between (here the decoding of the stored value commits a higher one),
    /// the set asks again, and a `shouldOverwrite` that keeps the highest value keeps it.
    @Test func aKeyTypesHookIsAskedAgainWhenTheValueChangedBeforeTheWrite() throws {
        try withTemporaryStore { store, _, log throws in
            try store.write { $0[.risingFrame] = Frame(x: 10) }
            let fired = Guarded(false)
            frameDecodingHook.withLock {
                $0 = {
                    guard !fired.withLock({ $0 }) else { return }
                    fired.withLock { $0 = true }
                    try? store.write { $0[.risingFrame] = Frame(x: 100) }
                }
            }
            defer { frameDecodingHook.withLock { $0 = nil } }
            try store.set(Frame(x: 50), for: .risingFrame)
            #expect(fired.withLock { $0 })
            #expect(store[.risingFrame] == Frame(x: 100))
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// Counts the decodings of `Frame` while `body` runs.
    private func decodings(_ body: () throws -> Void) rethrows -> Int {
        let count = Guarded(0)
        frameDecodingHook.withLock { $0 = { count.withLock { $0 += 1 } } }
        defer { frameDecodingHook.withLock { $0 = nil } }
        try body()
        return count.withLock { $0 }
    }

    /// A set compares with the value this process's last set stored, while the store still holds
    /// its bytes, instead of decoding them: a JSON set spent 40 % of its instructions there.
    @Test func aSetAfterASetComparesWithoutDecoding() throws {
        try withTemporaryStore { store, _, log throws in
            try store.set(Frame(x: 1), for: Self.frame)
            let decoded = try decodings {
                for x in 2...5 { try store.set(Frame(x: x), for: Self.frame) }
            }
            #expect(decoded == 0)
            #expect(store[Self.frame] == Frame(x: 5))
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// Bytes another writer stored instead are decoded: an equal value in other bytes stays a
    /// non-change, a different one a change, whatever this process set before.
    @Test func bytesAnotherWriterStoredAreDecodedAndCompared() throws {
        try withTemporaryStore { store, _, log throws in
            try store.set(Frame(x: 1), for: Self.frame)
            // The JSON of Frame(x: 2), in other bytes than its encoder's `2`.
            try store.setStoredValue(.json(" 2 "), named: Self.frame.name)
            let changes = Guarded<[String]>([])
            let token = store.observe(Self.frame) { change in
                changes.withLock { $0.append("\(change.oldValue.x)→\(change.newValue.x)") }
            }
            defer { token.cancel() }
            let before = try store.lastSequence()
            let decoded = try decodings { try store.set(Frame(x: 2), for: Self.frame) }
            #expect(decoded == 1)
            #expect(try store.lastSequence() == before, "an equal value in other bytes is no change")
            #expect(try store.storedValue(named: Self.frame.name) == .json(" 2 "))
            try store.set(Frame(x: 3), for: Self.frame)
            #expect(try store.lastSequence() == before + 1)
            #expect(eventually { changes.withLock { $0 } == ["2→3"] }, "\(changes.withLock { $0 })")
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// A read of the bytes this process last stored or read returns the value they encode
    /// without decoding them again; other bytes are decoded (and then known).
    @Test func aReadOfBytesAlreadyKnownIsNotDecodedAgain() throws {
        try withTemporaryStore { store, _, log throws in
            try store.set(Frame(x: 1), for: Self.frame)
            var seen: [Int] = []
            let afterSet = decodings {
                for _ in 0..<3 { seen.append(store[Self.frame].x) }
            }
            #expect(afterSet == 0)
            try store.setStoredValue(.json("7"), named: Self.frame.name)
            let afterOtherBytes = try decodings {
                for _ in 0..<3 { seen.append(try store.value(for: Self.frame).x) }
            }
            #expect(afterOtherBytes == 1)
            #expect(seen == [1, 1, 1, 7, 7, 7])
            try store.remove(Self.frame)
            #expect(store[Self.frame] == Frame(x: 0))
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// Reads in a snapshot and in a write transaction know the bytes too.
    @Test func snapshotAndTransactionReadsOfKnownBytesAreNotDecodedAgain() throws {
        try withTemporaryStore { store, _, log throws in
            try store.set(Frame(x: 3), for: Self.frame)
            var seen: [Int] = []
            let decoded = try decodings {
                seen.append(try store.read { $0[Self.frame].x })
                seen.append(try store.write { $0[Self.frame].x })
            }
            #expect(decoded == 0)
            #expect(seen == [3, 3])
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// A write transaction compares a value with the known bytes the key holds without decoding
    /// them; an equal value is still no change.
    @Test func aTransactionComparesWithKnownBytesWithoutDecoding() throws {
        try withTemporaryStore { store, _, log throws in
            try store.set(Frame(x: 1), for: Self.frame)
            let before = try store.lastSequence()
            let decoded = try decodings {
                try store.write { $0[Self.frame] = Frame(x: 1) }
                try store.write { $0[Self.frame] = Frame(x: 2) }
            }
            #expect(decoded == 0)
            #expect(try store.lastSequence() == before + 1, "only the second transaction changed the key")
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// Instances of a class are never shared between readers: each read decodes.
    @Test func aClassValueIsDecodedOnEveryRead() throws {
        final class Box: Codable, Sendable {
            let x: Int
            init(x: Int) { self.x = x }
        }
        try withTemporaryStore { store, _, _ throws in
            let key = PersistentDefaults.Key<Box>("box", default: Box(x: 0))
            try store.set(Box(x: 4), for: key)
            let first = store[key]
            let second = store[key]
            #expect(first.x == 4 && second.x == 4)
            #expect(first !== second)
            let optional = PersistentDefaults.Key<Box?>("optionalBox")
            try store.set(Box(x: 5), for: optional)
            let (third, fourth) = (store[optional], store[optional])
            #expect(third?.x == 5 && fourth?.x == 5)
            #expect(third !== fourth)
        }
    }
}
