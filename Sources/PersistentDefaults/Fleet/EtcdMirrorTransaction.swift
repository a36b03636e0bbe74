import Foundation

/// The keys an ``EtcdMirror/write(_:)`` body reads and sets: reads come from the local copy
/// at one etcd revision, writes become one etcd transaction that compares the
/// `mod_revision` of every key read.
///
/// ```swift
/// try await mirror.write { tx in
///     tx[.maxConnections] = tx[.maxConnections] * 2
///     tx[.banner] = "maintenance at 22:00"
/// }
/// ```
///
/// Valid only inside the body; a failed write through the subscript makes the whole
/// `write` throw and send nothing.
public final class EtcdMirrorTransaction {
    private let mirror: EtcdMirror
    /// The local snapshot; nil once the body returned.
    var snapshot: Snapshot?
    /// The etcd revision the snapshot reflects.
    let revision: Int64
    /// The local names whose etcd value at `revision` does not parse, with the revision it was
    /// put at: reading one throws.
    private let unparsable: [[UInt8]: Int64]
    /// The etcd keys read, with whether they existed at `revision`.
    private var reads: [Data: Bool] = [:]
    /// The operations, by etcd key, in the order first written.
    private var writes: [Data: EtcdOperation] = [:]
    private var order: [Data] = []
    private var firstError: (any Error)?

    init(mirror: EtcdMirror, snapshot: Snapshot) throws {
        self.mirror = mirror
        self.snapshot = snapshot
        let record = try mirror.store.core.mirrorRecord(localPrefix: mirror.localPrefixBytes, in: try snapshot.live())
        revision = record?.revision ?? 0
        unparsable = record?.unparsableNames ?? [:]
    }

    private func live() throws -> Snapshot {
        guard let snapshot else {
            throw PersistentDefaultsError.usedAfterClosure(type: "EtcdMirrorTransaction")
        }
        return snapshot
    }

    /// The etcd key of a mirrored key; throws for a key outside the local prefix.
    private func etcdKey(of key: PersistentDefaults.Keys) throws -> Data {
        try key.validate()
        guard let etcdKey = mirror.etcdKey(ofLocalName: key.nameBytes) else {
            throw EtcdMirrorError.keyOutsidePrefix(key: key.name, localPrefix: mirror.localPrefix)
        }
        return etcdKey
    }

    /// The key's value as the transaction sees it: its own write, else the local copy.
    /// Throws when the stored value does not decode, and
    /// ``EtcdMirrorError/unparsableValue(key:revision:)`` when the key's value in etcd does not
    /// parse (the local copy holds the last good one, which the write must not build on).
    public func value<Value>(for key: PersistentDefaults.Key<Value>) throws -> Value {
        // First, so that a kept transaction throws also for a key it wrote.
        let snapshot = try live()
        let etcdKey = try etcdKey(of: key)
        if let written = writes[etcdKey] {
            guard case .put(_, let typed) = written else { return key.defaultValue }
            let stored = try StoredValue(typedJSON: typed)
            do throws(StoredValueError) {
                return try key.codec.decode(stored.encodedValue)
            } catch {
                throw PersistentDefaultsError.decodingFailed(
                    key: key.name, type: "\(Value.self)", reason: error.description)
            }
        }
        if let revision = unparsable[key.nameBytes] {
            throw EtcdMirrorError.unparsableValue(key: key.name, revision: revision)
        }
        let transaction = try snapshot.live()
        if reads[etcdKey] == nil {
            reads[etcdKey] = try mirror.store.core.encodedValue(named: key.nameBytes, in: transaction) != nil
        }
        return try mirror.store.core.value(key, in: transaction)
    }

    /// Stores `value` for `key` when the transaction commits; the key's hooks apply (a value
    /// they remove deletes the etcd key).
    public func setValue<Value>(_ value: Value, for key: PersistentDefaults.Key<Value>) {
        recordingFailure {
            let etcdKey = try etcdKey(of: key)
            let encoded = try mirror.store.core.encode(value, for: key)
            try mirror.store.core.checkSize(encoded, of: key.name)
            if key.shouldRemove?(value) == true || (key.removesNil && encoded == [StoredValue.Tag.null.rawValue]) {
                record(.delete(key: etcdKey), for: etcdKey)
            } else {
                let typed = Data(try StoredValue(encodedValue: encoded).typedJSON.utf8)
                record(.put(key: etcdKey, value: typed), for: etcdKey)
            }
        }
    }

    /// Deletes the etcd key of `key` when the transaction commits.
    public func remove(_ key: PersistentDefaults.Keys) {
        recordingFailure {
            let etcdKey = try etcdKey(of: key)
            record(.delete(key: etcdKey), for: etcdKey)
        }
    }

    /// Reads and writes a key; a read that fails gives the default and fails the transaction.
    public subscript<Value>(key: PersistentDefaults.Key<Value>) -> Value {
        get {
            do {
                return try value(for: key)
            } catch {
                if firstError == nil { firstError = error }
                return key.defaultValue
            }
        }
        set { setValue(newValue, for: key) }
    }

    private func record(_ operation: EtcdOperation, for etcdKey: Data) {
        if writes.updateValue(operation, forKey: etcdKey) == nil { order.append(etcdKey) }
    }

    private func recordingFailure(_ body: () throws -> Void) {
        do { try body() } catch { if firstError == nil { firstError = error } }
    }

    /// The etcd transaction: for each key read, "unchanged since `revision`" — present then:
    /// `mod_revision < revision + 1` and `version > 0`; absent then: `version = 0` — and the
    /// writes.
    ///
    /// A key present at `revision` needs both comparisons: etcd compares a key that does not
    /// exist as all zeros, so `mod_revision < revision + 1` alone passes for a key deleted since.
    /// One comparison (`mod_revision = ` its exact revision) would need each key's `mod_revision`
    /// at `revision`, which the local copy does not keep. So a write may read 64 keys that exist
    /// (or 128 that do not) within etcd's default `--max-txn-ops` of 128.
    func request() throws -> EtcdTxnRequest {
        if let firstError { throw firstError }
        var compare: [EtcdCompare] = []
        for (key, existed) in reads.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            if existed {
                compare.append(EtcdCompare(key: key, result: .less, target: .modRevision(revision + 1)))
                compare.append(EtcdCompare(key: key, result: .greater, target: .version(0)))
            } else {
                compare.append(EtcdCompare(key: key, result: .equal, target: .version(0)))
            }
        }
        return EtcdTxnRequest(compare: compare, success: order.compactMap { writes[$0] })
    }
}
