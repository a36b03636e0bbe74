import Foundation
import PDTestSupport
import PersistentDefaults
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A value whose decoding reads another store and opens and closes a third one: user code that
/// runs on a reading thread while that thread's reader slots of other stores are in its cache.
struct StoreTouchingValue: Codable, Equatable, Sendable {
    var number: Int

    /// The stores the decoding uses, set by the one test that decodes this type.
    static let context = Guarded<(other: PersistentDefaults, throwawayPaths: [String])?>(nil)
    static let decodes = Atomic<Int>(0)

    init(number: Int) { self.number = number }

    init(from decoder: any Decoder) throws {
        number = try decoder.singleValueContainer().decode(Int.self)
        Self.decodes.add(1, ordering: .relaxed)
        guard let (other, paths) = Self.context.withLock({ $0 }) else { return }
        // A read of another store through this thread's slot of it (which moves the slot of
        // the store being decoded within the thread's cache).
        _ = other[SlotReadStressTests.counter]
        // A store opened and closed here: its environment closes, and this thread's slot of it
        // is dropped from the cache at the thread's next read of a store it has no slot for.
        let path = paths[number % paths.count]
        if let throwaway = try? PersistentDefaults(path: path) { _ = throwaway[SlotReadStressTests.counter] }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(number)
    }
}

/// What `StoreTouchingValue` encodes to, without its decoding's side effects.
struct Twin: Codable, Equatable, Sendable {
    var number: Int
    init(number: Int) { self.number = number }
    init(from decoder: any Decoder) throws { number = try decoder.singleValueContainer().decode(Int.self) }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(number)
    }
}

/// Reads through the thread's reader slot (which uses the slot and the thread's cache without
/// retaining them) under contention: more threads than cores, stores opened and closed around
/// the reads, threads that exit, a reader table too small for every thread, decoders that read
/// and close other stores. Run under ThreadSanitizer and AddressSanitizer, too.
@Suite("Reads: slot reads under contention")
struct SlotReadStressTests {
    static let counter = PersistentDefaults.Key<Int>("counter", default: 0)
    static let probe = PersistentDefaults.Key<StoreTouchingValue>("probe", default: StoreTouchingValue(number: -1))
    /// The same name as `probe`, another type with the same encoding: the readers do not know
    /// the values it writes (this process remembers the value of a key it last stored or read),
    /// so they decode them.
    static let probeWriter = PersistentDefaults.Key<Twin>("probe", default: Twin(number: -1))

    static let readers = 16

    @Test func sixteenThreadsReadWhileOtherStoresOpenAndCloseAndThreadsExit() throws {
        try withTemporaryDirectory { root in
            let store = try boundedStore(at: root + "/main")
            let writes = 400
            let failures = Guarded<[String]>([])
            onJoinedThreads(Self.readers + 2) { index in
                if index == Self.readers {
                    for value in 1...writes { store[Self.counter] = value }
                    return
                }
                if index == Self.readers + 1 {
                    // Threads that read once and exit: their slots are retired by the key's
                    // destructor while the other threads read.
                    for _ in 0..<20 { onJoinedThreads(2) { _ in _ = store[Self.counter] } }
                    return
                }
                var last = 0
                for iteration in 0..<300 {
                    let seen = store[Self.counter]
                    if seen < last { failures.withLock { $0.append("thread \(index): \(seen) after \(last)") } }
                    last = seen
                    if iteration % 20 == index % 20 {
                        // A store of this thread's own, opened, read and closed: its slot stays in
                        // this thread's cache until the next read of another store drops it.
                        do {
                            let own = try boundedStore(at: root + "/own-\(index)")
                            own[Self.counter] = iteration
                            if own[Self.counter] != iteration { failures.withLock { $0.append("own store") } }
                        } catch {
                            failures.withLock { $0.append("open: \(error)") }
                        }
                    }
                    if iteration % 25 == 0 {
                        // A nested read of the same store inside a read scope.
                        let pair = try? store.read { snapshot in (snapshot[Self.counter], store[Self.counter]) }
                        if let pair, pair.1 < pair.0 {
                            failures.withLock { $0.append("nested \(pair.1) older than \(pair.0)") }
                        }
                    }
                }
            }
            #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 }.prefix(5))")
            #expect(store[Self.counter] == writes)
        }
    }

    @Test func decodersThatReadAndCloseOtherStoresWhileSixteenThreadsRead() throws {
        try withTemporaryDirectory { root in
            let store = try boundedStore(at: root + "/main")
            let other = try boundedStore(at: root + "/other")
            other[Self.counter] = 3
            let paths = (0..<4).map { root + "/throwaway-\($0)" }
            StoreTouchingValue.context.withLock { $0 = (other, paths) }
            defer { StoreTouchingValue.context.withLock { $0 = nil } }
            let before = StoreTouchingValue.decodes.load(ordering: .relaxed)
            let writes = 200
            let failures = Guarded<[String]>([])
            onJoinedThreads(Self.readers + 1) { index in
                if index == Self.readers {
                    // Each new value makes the readers decode again.
                    for value in 1...writes { store[Self.probeWriter] = Twin(number: value) }
                    return
                }
                var last = -1
                var iteration = 0
                while last < writes {
                    iteration += 1
                    // Decoded after the read, and inside a read scope of the store.
                    let seen =
                        iteration % 2 == 0
                        ? store[Self.probe].number
                        : ((try? store.read { $0[Self.probe].number }) ?? -2)
                    if seen < last { failures.withLock { $0.append("thread \(index): \(seen) after \(last)") } }
                    last = seen
                    if other[Self.counter] != 3 { failures.withLock { $0.append("other store") } }
                }
            }
            #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 }.prefix(5))")
            #expect(store[Self.probe].number == writes)
            // The decoder ran: the test exercised what it says. Not once per reader: when the
            // writer is done before a reader starts, that reader may read the newest value,
            // decoded already, and decode nothing (12 decodes for 16 readers in one run).
            #expect(StoreTouchingValue.decodes.load(ordering: .relaxed) - before > 0)
        }
    }

    /// A reader table of 12 slots (3 kept per thread at most) for 16 reading threads: reads find
    /// the table full and reclaim other threads' idle slots while those threads read.
    @Test func sixteenThreadsReadWithAReaderTableTooSmallForThem() throws {
        try withTemporaryDirectory { path in
            var options = PersistentDefaults.Options()
            options.durability = .bounded(interval: .seconds(10))
            options.maxReaders = 12
            options.errorHandler = { _ in }
            let store = try PersistentDefaults(path: path, options: options)
            let writes = 300
            let failures = Guarded<[String]>([])
            onJoinedThreads(Self.readers + 1) { index in
                if index == Self.readers {
                    for value in 1...writes { store[Self.counter] = value }
                    return
                }
                var last = 0
                for _ in 0..<300 {
                    do {
                        let seen = try store.value(for: Self.counter)
                        if seen < last { failures.withLock { $0.append("thread \(index): \(seen) after \(last)") } }
                        last = seen
                    } catch PersistentDefaultsError.lmdb(let code, _) where code == .readersFull {
                        // Every slot in use by reads at this moment: refused, not corrupted.
                    } catch {
                        failures.withLock { $0.append("\(error)") }
                    }
                }
            }
            #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 }.prefix(5))")
            #expect(store[Self.counter] == writes)
        }
    }
}
