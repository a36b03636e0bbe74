import Dispatch
import Foundation
import PDTestSupport
import PersistentDefaults
import Synchronization

/// `fleet/…`: a store mirroring an etcd prefix (`EtcdMirror`), against an etcd member this run
/// starts on loopback (Debian `etcd-server`; `tools/setup` installs it).
let fleetCases: [BenchmarkCase] = [
    BenchmarkCase(name: "fleet/put-to-observer") { [try putToObserver($0)] },
    BenchmarkCase(name: "fleet/initial-copy-10000") { [try initialCopy($0)] },
    BenchmarkCase(name: "fleet/get-mirrored-key") { try mirroredReads($0) },
]

struct BenchmarkFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Runs `body` in a task and blocks this (the main) thread until it finishes.
private func blocking(_ body: @escaping @Sendable () async throws -> Void) throws {
    let done = DispatchSemaphore(value: 0)
    let failure = Mutex<(any Error)?>(nil)
    Task {
        do { try await body() } catch { failure.withLock { $0 = error } }
        done.signal()
    }
    done.wait()
    if let error = failure.withLock({ $0 }) { throw error }
}

/// A store with a started mirror of `/bench/` into `fleet.`.
private func mirroredStore(_ path: String, _ server: EtcdCluster) throws -> (PersistentDefaults, EtcdMirror) {
    var options = PersistentDefaults.Options()
    options.durability = .bounded(interval: .milliseconds(200))
    let store = try PersistentDefaults(path: path, options: options)
    let mirror = try EtcdMirror(
        store: store, endpoints: server.endpoints, etcdPrefix: "/bench/", localPrefix: "fleet.")
    try blocking { try await mirror.start() }
    return (store, mirror)
}

/// From a `set` through another host's mirror (the put to etcd) to this host's observer callback.
private func putToObserver(_ context: RunContext) throws -> Measurement {
    try context.withTemporaryDirectory("fleet-delay") { path in
        let server = try EtcdCluster()
        let (writer, writerMirror) = try mirroredStore(path + "/writer", server)
        let (reader, readerMirror) = try mirroredStore(path + "/reader", server)
        _ = writer
        let key = PersistentDefaults.Key<Int>("fleet.stamp", default: -1)
        let started = Atomic<UInt64>(0)
        let delays = Mutex<[Double]>([])
        let arrived = DispatchSemaphore(value: 0)
        let token = reader.observe(key) { _ in
            let now = monotonicNanoseconds()
            delays.withLock { $0.append(Double(now - started.load(ordering: .acquiring))) }
            arrived.signal()
        }
        for index in 0..<(context.quick ? 60 : 500) {
            started.store(monotonicNanoseconds(), ordering: .releasing)
            try blocking { try await writerMirror.set(index, for: key) }
            guard arrived.wait(timeout: .now() + 5) == .success else { throw BenchmarkFailure("no callback in 5 s") }
        }
        token.cancel()
        try blocking {
            try await writerMirror.stop()
            try await readerMirror.stop()
        }
        return Measurement(
            "fleet/put-to-observer", samples: delays.withLock { Array($0.dropFirst(10)) },
            note: "one host's mirror.set (an etcd put) to another host's observer callback, loopback etcd")
    }
}

/// `start()` of a new store's mirror over a prefix of 10,000 keys: one range, one commit.
private func initialCopy(_ context: RunContext) throws -> Measurement {
    try context.withTemporaryDirectory("fleet-copy") { path in
        let server = try EtcdCluster()
        let (_, loader) = try mirroredStore(path + "/loader", server)
        for batch in 0..<100 {
            try blocking {
                try await loader.write { tx in
                    for index in 0..<100 {
                        tx[PersistentDefaults.Key<Int>("fleet.k\(batch * 100 + index)", default: 0)] = index
                    }
                }
            }
        }
        try blocking { try await loader.stop() }
        let store = try PersistentDefaults(path: path + "/copy")
        let mirror = try EtcdMirror(
            store: store, endpoints: server.endpoints, etcdPrefix: "/bench/", localPrefix: "fleet.")
        let start = monotonicNanoseconds()
        try blocking { try await mirror.start() }
        let elapsed = Double(monotonicNanoseconds() - start)
        guard try store.keyNames().count == 10_000 else { throw BenchmarkFailure("the copy is incomplete") }
        try blocking { try await mirror.stop() }
        return Measurement(
            "fleet/initial-copy-10000", value: elapsed / 1e6, unit: "ms",
            note: "EtcdMirror.start() on an empty store: range of 10,000 keys, one LMDB commit")
    }
}

/// A read of a mirrored key and of a key outside any mirror, interleaved.
private func mirroredReads(_ context: RunContext) throws -> [Measurement] {
    try context.withTemporaryDirectory("fleet-read") { path in
        let server = try EtcdCluster()
        let (store, mirror) = try mirroredStore(path + "/store", server)
        let mirrored = PersistentDefaults.Key<Int>("fleet.value", default: 0)
        let other = PersistentDefaults.Key<Int>("local.value", default: 0)
        try blocking { try await mirror.set(3, for: mirrored) }
        store[other] = 3
        var sink = 0
        let (first, second) = try measureInterleaved(
            .fast(quick: context.quick), { _ in sink &+= store[mirrored] }, { _ in sink &+= store[other] })
        precondition(sink != 1)  // Keeps the reads.
        try blocking { try await mirror.stop() }
        return [
            Measurement("fleet/get-mirrored-key", samples: first, note: "store[key] of a key an EtcdMirror owns"),
            Measurement("fleet/get-other-key", samples: second),
        ]
    }
}
