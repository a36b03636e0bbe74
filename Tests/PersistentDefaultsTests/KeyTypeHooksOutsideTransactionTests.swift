import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// What the decoding of `Score` and the hooks of `BestScoreKey` run, set per test.
private let userCodeHook = Guarded<(@Sendable () -> Void)?>(nil)

/// A Codable value (stored as JSON) whose decoding runs `userCodeHook`.
private struct Score: Codable, Equatable, Sendable {
    var points: Int
    init(points: Int) { self.points = points }
    init(from decoder: any Decoder) throws {
        userCodeHook.withLock { $0 }?()
        points = try decoder.singleValueContainer().decode(Int.self)
    }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(points)
    }
}

/// Keeps the best score ever set (seed 003's `shouldOverwrite`); its hooks run `userCodeHook`.
private struct BestScoreKey: CodableDefaultsKey {
    static let defaultValue = Score(points: 0)
    static func shouldRemove(_ value: Score) -> Bool {
        userCodeHook.withLock { $0 }?()
        return false
    }
    static func shouldOverwrite(_ oldValue: Score, _ newValue: Score) -> Bool {
        userCodeHook.withLock { $0 }?()
        return newValue.points > oldValue.points
    }
}

/// A key type's `shouldRemove` and `shouldOverwrite` hooks, and the decoding of the stored value
/// that `shouldOverwrite` is given, are the user's code, which never runs under the store's
/// locks (README). A `set` — a `@PersistentDefault` assignment — ran them inside its write
/// transaction: there a write of theirs threw `nestedWrite`, and in a group commit they ran
/// under LMDB's writer lock for other threads' writes too (failed 3 of 3 runs before the fix).
@Suite(.serialized) struct KeyTypeHooksOutsideTransactionTests {
    static let calls = PersistentDefaults.Key<Int>("hookCalls", default: 0)

    /// Sets a key type from `threads` threads at once through wrappers, while its decoding and
    /// hooks each write the store: no write may fail, and the best score is kept.
    private func setWhileUserCodeWrites(threads: Int, durability: PersistentDefaults.Durability) throws {
        var options = PersistentDefaults.Options()
        options.durability = durability
        try withTemporaryStore(options: options) { store, _, log throws in
            // Stored by a transaction, which the next set does not know the value of: it decodes.
            try store.write { $0[BestScoreKey()] = Score(points: 1) }
            let errors = Guarded<[String]>([])
            userCodeHook.withLock {
                $0 = {
                    do {
                        try store.write { $0[Self.calls] += 1 }
                    } catch {
                        errors.withLock { $0.append("\(error)") }
                    }
                }
            }
            defer { userCodeHook.withLock { $0 = nil } }
            DispatchQueue.concurrentPerform(iterations: threads) { index in
                let best = PersistentDefault(BestScoreKey(), in: store)
                best.wrappedValue = Score(points: 2 + index)
            }
            #expect(errors.withLock { $0 } == [])
            #expect(store[Self.calls] >= 2, "the hooks ran")
            #expect(store[BestScoreKey()] == Score(points: 1 + threads))
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    @Test func hooksAndDecodingThatWriteTheStoreDuringAWrapperSetSucceed() throws {
        try setWhileUserCodeWrites(threads: 1, durability: .sync)
    }

    @Test func hooksThatWriteDuringConcurrentGroupCommittedSetsSucceed() throws {
        try setWhileUserCodeWrites(threads: 8, durability: .sync)
    }

    /// The hooks judge the stored value before the transaction, which writes only if the key
    /// still holds what they judged: sets racing from many threads keep the best score, as
    /// when the hooks ran inside the transaction.
    @Test(arguments: [PersistentDefaults.Durability.sync, .bounded(interval: .seconds(10))])
    func racingSetsKeepTheBestScore(durability: PersistentDefaults.Durability) throws {
        var options = PersistentDefaults.Options()
        options.durability = durability
        try withTemporaryStore(options: options) { store, _, log throws in
            // Rising scores, interleaved between the threads: most sets overwrite, and each
            // thread's last set races with the others' last ones.
            let (threads, rounds) = (8, 200)
            for _ in 0..<5 {
                try store.remove(BestScoreKey())
                DispatchQueue.concurrentPerform(iterations: threads) { thread in
                    let best = PersistentDefault(BestScoreKey(), in: store)
                    for round in 0..<rounds { best.wrappedValue = Score(points: 1 + round * threads + thread) }
                }
                #expect(store[BestScoreKey()].points == rounds * threads)
            }
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }
}
