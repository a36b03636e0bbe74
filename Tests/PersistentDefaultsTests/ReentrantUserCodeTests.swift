import Foundation
import Observation
import PDTestSupport
import PersistentDefaults
import Testing

/// What the user's decoding code runs while it decodes: set per test, read by the types below.
private let decodingHook = Guarded<(@Sendable () -> Void)?>(nil)

/// Makes the next decoding of a hooked type run `action`, and later ones nothing.
private func onFirstDecode(_ action: @escaping @Sendable () -> Void) {
    let decodes = Guarded(0)
    decodingHook.withLock {
        $0 = {
            let first = decodes.withLock {
                $0 += 1
                return $0 == 1
            }
            if first { action() }
        }
    }
}

/// A Codable type (stored as JSON) whose decoding runs `decodingHook`.
private struct HookedCodable: Codable, Equatable, Sendable {
    var number: Int
    init(number: Int) { self.number = number }
    init(from decoder: any Decoder) throws {
        decodingHook.withLock { $0 }?()
        number = try decoder.singleValueContainer().decode(Int.self)
    }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(number)
    }
}

/// A RawRepresentable type whose `init(rawValue:)` runs `decodingHook`.
private struct HookedRaw: RawRepresentable, Codable, Equatable, Sendable {
    var rawValue: Int
    init(rawValue: Int) {
        decodingHook.withLock { $0 }?()
        self.rawValue = rawValue
    }
}

/// The user's code that runs while the library reads — a type's decoding, a conversion — runs
/// with no lock of the store held: it may read, write, and even write enough to grow the map.
@Suite(.serialized) struct ReentrantUserCodeTests {
    /// Runs `body` on another thread; false when it has not returned after `timeout` seconds
    /// (a deadlock: that thread is left behind, and the test fails instead of hanging).
    private func finishes(within timeout: Double = 60, _ body: @escaping @Sendable () -> Void) -> Bool {
        let done = DispatchSemaphore(value: 0)
        Thread {
            body()
            done.signal()
        }.start()
        return done.wait(timeout: .now() + timeout) == .success
    }

    /// A store with a 1 MiB map, so that the hook's 2 MiB write must grow it.
    private func smallMapStore(_ body: (PersistentDefaults) throws -> Void) throws {
        var options = PersistentDefaults.Options()
        options.initialMapSize = 1 << 20
        try withTemporaryStore(options: options) { store, _, _ throws in try body(store) }
    }

    private static let big = PersistentDefaults.Key<Data>("big", default: Data())

    /// Stores `value` through a transaction, so that the next read decodes it: a value this
    /// process's `set` stored is known to the key and not decoded again (`Key.lastKnown`).
    private static func storeUnknown<Value: Sendable>(
        _ value: Value, for key: PersistentDefaults.Key<Value>, in store: PersistentDefaults
    ) throws {
        try store.write { try $0.set(value, for: key) }
    }

    /// Stores `stored` under `key` in a store with a 1 MiB map, makes the first decoding write
    /// 2 MiB (the map must grow), then reads with `read` on another thread: the read must
    /// return the stored value and the write must land.
    private func readWhoseDecodingGrowsTheMap<Value: Equatable & Sendable>(
        _ key: PersistentDefaults.Key<Value>, stored: Value,
        read: @escaping @Sendable (PersistentDefaults, PersistentDefaults.Key<Value>) -> Value?
    ) throws {
        try smallMapStore { store in
            try Self.storeUnknown(stored, for: key, in: store)
            onFirstDecode { try? store.set(Data(repeating: 1, count: 2 << 20), for: Self.big) }
            defer { decodingHook.withLock { $0 = nil } }
            let result = Guarded<Value?>(nil)
            #expect(
                finishes {
                    let value = read(store, key)
                    result.withLock { $0 = value }
                })
            #expect(result.withLock { $0 } == stored)
            #expect(store[Self.big].count == 2 << 20)
        }
    }

    @Test func aDecoderThatWritesEnoughToGrowTheMapDoesNotDeadlockAGet() throws {
        try readWhoseDecodingGrowsTheMap(
            PersistentDefaults.Key<HookedCodable>("hooked", default: HookedCodable(number: 0)),
            stored: HookedCodable(number: 7), read: { store, key in store[key] })
    }

    @Test func aRawValueInitialiserThatWritesDoesNotDeadlockAGet() throws {
        try readWhoseDecodingGrowsTheMap(
            PersistentDefaults.Key<HookedRaw>("raw", default: HookedRaw(rawValue: 0)),
            stored: HookedRaw(rawValue: 5), read: { store, key in try? store.value(for: key) })
    }

    /// The start value of `updates(for:)` used to be decoded under the observer registry's
    /// lock, where a decoder that observes the store waited for that lock forever.
    @Test func aDecoderThatObservesTheStoreDoesNotDeadlockUpdates() throws {
        try withTemporaryStore { store, _, _ throws in
            let key = PersistentDefaults.Key<HookedCodable>("observed", default: HookedCodable(number: 0))
            try store.set(HookedCodable(number: 9), for: key)
            decodingHook.withLock { $0 = { store.observe(.launchCount) { _ in }.cancel() } }
            defer { decodingHook.withLock { $0 = nil } }
            let first = Guarded<Int?>(nil)
            #expect(
                finishes {
                    let done = DispatchSemaphore(value: 0)
                    Task(executorPreference: ThreadTaskExecutor.shared) {
                        for await value in store.updates(for: key) {
                            first.withLock { $0 = value.number }
                            break
                        }
                        done.signal()
                    }
                    done.wait()
                })
            #expect(first.withLock { $0 } == 9)
            // Later changes still arrive, after the start value.
            let seen = Guarded<[Int]>([])
            #expect(
                finishes {
                    let done = DispatchSemaphore(value: 0)
                    let ready = DispatchSemaphore(value: 0)
                    Task(executorPreference: ThreadTaskExecutor.shared) {
                        var count = 0
                        for await value in store.updates(for: key) {
                            seen.withLock { $0.append(value.number) }
                            count += 1
                            if count == 1 { ready.signal() }
                            if value.number == 10 { break }
                        }
                        done.signal()
                    }
                    ready.wait()
                    try? store.set(HookedCodable(number: 10), for: key)
                    done.wait()
                })
            #expect(seen.withLock { $0 } == [9, 10])
        }
    }

    /// A change committed while the start value decodes (here by the decoder itself) is
    /// delivered first; the older start value must not be yielded after it.
    @Test func aChangeCommittedWhileTheStartValueDecodesIsNotOvertakenByIt() throws {
        try withTemporaryStore { store, _, _ throws in
            let key = PersistentDefaults.Key<HookedCodable>("raced", default: HookedCodable(number: 0))
            try store.set(HookedCodable(number: 9), for: key)
            onFirstDecode { try? store.set(HookedCodable(number: 100), for: key) }
            defer { decodingHook.withLock { $0 = nil } }
            let stream = store.updates(for: key)
            let first = Guarded<Int?>(nil)
            #expect(
                finishes {
                    let done = DispatchSemaphore(value: 0)
                    Task {
                        for await value in stream {
                            first.withLock { $0 = value.number }
                            break
                        }
                        done.signal()
                    }
                    done.wait()
                })
            #expect(first.withLock { $0 } == 100)
        }
    }

    /// A property wrapper's Observation tracking is told that its key changed and decodes
    /// nothing (it used to decode the old and the new value of every commit for nobody).
    @Test func aTrackedKeysCommitsDecodeNothingForTheTracking() throws {
        try withTemporaryStore { store, _, _ throws in
            let key = PersistentDefaults.Key<HookedCodable>("tracked", default: HookedCodable(number: 0))
            let wrapper = PersistentDefault(key, in: store)
            let decodes = Guarded(0)
            decodingHook.withLock { $0 = { decodes.withLock { $0 += 1 } } }
            defer { decodingHook.withLock { $0 = nil } }
            try store.set(HookedCodable(number: 1), for: key)
            let changed = DispatchSemaphore(value: 0)
            withObservationTracking {
                _ = wrapper.wrappedValue
            } onChange: {
                changed.signal()
            }
            let before = decodes.withLock { $0 }
            try store.set(HookedCodable(number: 2), for: key)
            #expect(changed.wait(timeout: .now() + 20) == .success)
            // The set compares with the value the previous set stored (known: not decoded again,
            // see `Key.lastKnown`); the tracking adds no decoding.
            #expect(decodes.withLock { $0 } - before == 0)
            #expect(wrapper.wrappedValue.number == 2)
        }
    }

    /// The start value is decoded after the registration, so deliveries can overtake it: under
    /// writers on more threads than cores, every stream started meanwhile must still yield
    /// values in commit order (never the older start value after a newer change).
    @Test func updatesStartedUnderContendedWritesYieldValuesInCommitOrder() throws {
        try withTemporaryStore { store, _, _ throws in
            let counter = PersistentDefaults.Key<Int>("counter", default: 0)
            let stop = Guarded(false)
            let writers = DispatchGroup()
            for _ in 0..<4 {
                writers.enter()
                Thread {
                    while !stop.withLock({ $0 }) { try? store.write { $0[counter] += 1 } }
                    writers.leave()
                }.start()
            }
            let sequences = Guarded<[[Int]]>([])
            #expect(
                finishes {
                    let done = DispatchGroup()
                    for _ in 0..<40 {
                        done.enter()
                        Task.detached {
                            var seen: [Int] = []
                            for await value in store.updates(for: counter) {
                                seen.append(value)
                                if seen.count == 3 { break }
                            }
                            sequences.withLock { $0.append(seen) }
                            done.leave()
                        }
                    }
                    done.wait()
                })
            stop.withLock { $0 = true }
            writers.wait()
            let all = sequences.withLock { $0 }
            #expect(all.count == 40)
            for seen in all { #expect(seen == seen.sorted() && Set(seen).count == seen.count, "\(seen)") }
        }
    }

    @Test func aWriteThatMustGrowTheMapInsideAReadScopeIsRefusedNotDeadlocked() throws {
        try smallMapStore { store in
            let outcome = Guarded<String?>(nil)
            #expect(
                finishes {
                    do {
                        try store.read { _ in try store.set(Data(repeating: 3, count: 2 << 20), for: Self.big) }
                        outcome.withLock { $0 = "written" }
                    } catch {
                        outcome.withLock { $0 = "\(error)" }
                    }
                })
            // Either it worked or it said why; the store stays usable.
            let said = try #require(outcome.withLock { $0 })
            #expect(said == "written" || said.contains("read"), "\(said)")
            try store.set(Data(repeating: 4, count: 2 << 20), for: Self.big)
            #expect(store[Self.big].first == 4)
        }
    }
}
