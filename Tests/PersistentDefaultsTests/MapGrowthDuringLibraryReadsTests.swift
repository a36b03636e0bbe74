import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

#if canImport(Glibc)
    import Glibc
#endif

/// LMDB's reader-table mutex in a store's `lock.mdb`, mapped into this process so that a test can
/// hold it: a read transaction that begins while it is held (`mdb_txn_begin` claims a reader slot
/// under it) stops there, with the library's side of the read already entered. Layout of LMDB
/// 0.9 (mdb.c): the lock file begins with `MDB_txbody`, two 32-bit words and then
/// `pthread_mutex_t mtb_rmutex`, a process-shared robust mutex.
private final class ReaderTableMutex: @unchecked Sendable {
    // @unchecked Sendable: the mapping is only used through the process-shared mutex in it and
    // by reading that mutex's lock word.
    private let mapping: UnsafeMutableRawPointer
    private static let length = 4096
    private static let offset = 8

    init(store path: String) throws {
        let descriptor = open(path + "/lock.mdb", O_RDWR | O_CLOEXEC)
        guard descriptor >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        defer { close(descriptor) }
        let mapped = mmap(nil, Self.length, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0)
        guard let mapped, mapped != MAP_FAILED else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        mapping = mapped
    }

    deinit { munmap(mapping, Self.length) }

    private var mutex: UnsafeMutablePointer<pthread_mutex_t> {
        (mapping + Self.offset).assumingMemoryBound(to: pthread_mutex_t.self)
    }

    func lock() -> Bool { pthread_mutex_lock(mutex) == 0 }
    func unlock() { pthread_mutex_unlock(mutex) }

    /// Whether a thread waits for the mutex: glibc sets `FUTEX_WAITERS` in a robust mutex's lock
    /// word (its first 32 bits) while one does.
    var hasWaiter: Bool { (mapping + Self.offset).load(as: UInt32.self) & 0x8000_0000 != 0 }
}

/// Reads of the library's own that meet a map growth, of this process or another, stopped at
/// the right moment by holding LMDB's reader-table mutex.
@Suite(.serialized) struct MapGrowthDuringLibraryReadsTests {
    static let blob = PersistentDefaults.Key<Data>("blob", default: Data())

    /// `statistics()` reads the environment's facts inside its read, whose hold of the
    /// transaction gate is the thread's reader slot; the gate's exclusive side (growing the map)
    /// waits for that slot, so the facts must not take the gate's shared side again.
    @Test func statisticsWhileThisProcessGrowsTheMapEnds() throws {
        var options = PersistentDefaults.Options()
        options.initialMapSize = 64 << 10
        try withTemporaryDirectory { path throws in
            let store = try PersistentDefaults(path: path, options: options)
            let initialMap = try store.statistics().mapSize
            let readerTable = try ReaderTableMutex(store: path)
            try #require(readerTable.lock())
            // A new thread's first read begins a transaction, which waits for the mutex with the
            // thread's slot busy: inside the read, before `statistics()` asks for the facts.
            let statistics = Guarded<StoreStatistics?>(nil)
            let statisticsDone = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                statistics.withLock { $0 = try? store.statistics() }
                statisticsDone.signal()
            }
            let readWaits = eventually { readerTable.hasWaiter }
            // A set that does not fit: the map grows first, under the gate's exclusive side, which
            // waits for that read.
            let setDone = DispatchSemaphore(value: 0)
            let setError = Guarded<String?>(nil)
            Thread.detachNewThread {
                do { try store.set(Data(repeating: 7, count: 4 << 20), for: Self.blob) } catch {
                    setError.withLock { $0 = "\(error)" }
                }
                setDone.signal()
            }
            let growthWaits = eventually { store.core.environment.gate.isExclusiveRaised }
            readerTable.unlock()
            let statisticsEnded = statisticsDone.wait(timeout: .now() + 10) == .success
            let setEnded = setDone.wait(timeout: .now() + 10) == .success
            #expect(readWaits)
            #expect(growthWaits)
            #expect(statisticsEnded, "statistics() never returned")
            #expect(setEnded, "the set that grows the map never returned")
            guard statisticsEnded, setEnded else {
                // Deadlocked: releasing the store would wait for the stuck threads too.
                _ = Unmanaged.passRetained(store)
                return
            }
            #expect(statistics.withLock { $0 } != nil)
            #expect(setError.withLock { $0 } == nil)
            #expect(try store.value(for: Self.blob).count == 4 << 20)
            #expect(try store.statistics().mapSize > initialMap)
        }
    }

    /// A read-only open maps the store at its size then, and reads the databases' names in a read
    /// transaction of its own: when another process grew the map in between, that transaction
    /// meets `MDB_MAP_RESIZED`, and the open adopts the larger map as reads do.
    @Test func aReadOnlyOpenWhileAnotherProcessGrowsTheMapOpens() throws {
        try withTemporaryDirectory { path throws in
            try setFromAnotherProcess(path, "counter", 5)
            let grower = try ChildProcess(Products.fixture, ["grow-on-input", path, "\(4 << 20)"], input: .open)
            defer { grower.kill() }
            #expect(grower.wait(for: "opened"))
            let readerTable = try ReaderTableMutex(store: path)
            try #require(readerTable.lock())
            // The open maps the store, then its first read transaction waits for the mutex.
            let opened = Guarded<Result<Int, any Error>?>(nil)
            let openDone = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                var options = PersistentDefaults.Options()
                options.readOnly = true
                options.initialMapSize = 64 << 10
                opened.withLock { result in
                    result = Result {
                        try PersistentDefaults(path: path, options: options)
                            .value(for: PersistentDefaults.Key<Int>("counter", default: 0))
                    }
                }
                openDone.signal()
            }
            let openWaits = eventually { readerTable.hasWaiter }
            grower.closeInput()
            let grown = grower.wait(for: "grown")
            readerTable.unlock()
            #expect(openWaits)
            #expect(grown, "\(grower.text)")
            try #require(openDone.wait(timeout: .now() + 20) == .success)
            #expect(throws: Never.self) { try opened.withLock { $0 }?.get() }
            #expect((try? opened.withLock { $0 }?.get()) == 5)
        }
    }
}
