import Foundation

/// A prefix of the store that an ``EtcdMirror`` owns, as recorded in the store's `meta`
/// database: what `pdinspect stat` shows.
///
/// ```swift
/// for mirror in try store.mirroredPrefixes() {
///     print(mirror.localPrefix, "←", mirror.etcdPrefix, "revision", mirror.revision)
/// }
/// ```
public struct MirroredPrefix: Sendable, Equatable {
    /// The local key names the mirror owns start with this.
    public let localPrefix: String
    /// The etcd keys mirrored start with this.
    public let etcdPrefix: String
    /// The endpoints the mirror was last created with.
    public let endpoints: [String]
    /// The etcd cluster the revision belongs to (its `cluster_id`); empty before the first copy.
    public let clusterID: String
    /// The etcd revision the local copy reflects; 0 before the first copy.
    public let revision: Int64
    /// When a revision was last applied.
    public let lastApplied: Date?
    /// When a mirror last heard from etcd, as recorded (at most ``EtcdMirror/Options/contactRecordInterval`` old
    /// while a mirror runs and etcd answers).
    public let lastContact: Date?
}

/// The JSON of a `mirror/<local prefix>` entry in `meta` (sorted keys).
struct MirrorRecord: Codable, Equatable {
    var etcdPrefix: String
    var endpoints: [String]
    var clusterID: String = ""
    var revision: Int64 = 0
    /// Seconds since 2001-01-01 (`JSONEncoder`'s default), as every date in `meta`.
    var applied: Date?
    var contact: Date?
    /// The local names whose etcd value at `revision` does not parse or cannot be stored (the
    /// local copy keeps the last good value), each with the revision that value was put at, in
    /// byte order; nil when there is none. Written in the same transaction as the values: a
    /// mirror's write that reads one of them is refused
    /// (``EtcdMirrorError/unparsableValue(key:revision:)``).
    var unparsable: [UnparsableValue]?

    /// A local name whose etcd value does not parse, and the revision that value was put at.
    struct UnparsableValue: Codable, Equatable {
        var name: String
        var revision: Int64
    }

    /// ``unparsable`` by name bytes (a key name is its UTF-8 bytes: a `String`-keyed dictionary
    /// would merge canonically equal names). A name that is not UTF-8, which no key can read, is
    /// left out when set.
    var unparsableNames: [[UInt8]: Int64] {
        get {
            Dictionary((unparsable ?? []).map { (Array($0.name.utf8), $0.revision) }, uniquingKeysWith: max)
        }
        set {
            let entries = newValue.sorted { $0.key.lexicographicallyPrecedes($1.key) }.compactMap { name, revision in
                String(validating: name, as: UTF8.self).map { UnparsableValue(name: $0, revision: revision) }
            }
            unparsable = entries.isEmpty ? nil : entries
        }
    }

    /// `names` as ``unparsableNames`` keeps them.
    static func storable(_ names: [[UInt8]: Int64]) -> [[UInt8]: Int64] {
        names.filter { String(validating: $0.key, as: UTF8.self) != nil }
    }
}

extension StoreCore {
    /// Meta keys of mirrored prefixes: this, then the local prefix's UTF-8 bytes.
    static let mirrorKeyPrefix = Array("mirror/".utf8)

    private static let mirrorEncoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// The record of the mirror owning `localPrefix`; nil when there is none.
    func mirrorRecord(localPrefix: [UInt8], in transaction: Transaction) throws -> MirrorRecord? {
        try (Self.mirrorKeyPrefix + localPrefix).withUnsafeBytes { key in
            try transaction.withValue(databases.meta, key) { value in
                try value.map { try Self.decodeMirrorRecord($0, localPrefix: localPrefix) }
            }
        }
    }

    /// Writes the record of the mirror owning `localPrefix`.
    func recordMirror(_ record: MirrorRecord, localPrefix: [UInt8], in transaction: Transaction) throws {
        let encoded = Array(try Self.mirrorEncoder.encode(record))
        try (Self.mirrorKeyPrefix + localPrefix).withUnsafeBytes { key in
            try encoded.withUnsafeBytes { try transaction.put(databases.meta, key, $0) }
        }
    }

    /// Removes the record of the mirror owning `localPrefix`; returns whether there was one.
    func removeMirrorRecord(localPrefix: [UInt8], in transaction: Transaction) throws -> Bool {
        try (Self.mirrorKeyPrefix + localPrefix).withUnsafeBytes { try transaction.delete(databases.meta, $0) }
    }

    /// The local prefixes owned by mirrors, in byte order, with their raw records.
    func mirroredPrefixes(in transaction: Transaction) throws -> [(localPrefix: [UInt8], record: [UInt8])] {
        var found: [(localPrefix: [UInt8], record: [UInt8])] = []
        try Self.mirrorKeyPrefix.withUnsafeBytes { start in
            try transaction.forEach(databases.meta, from: start) { key, value in
                guard key.starts(with: Self.mirrorKeyPrefix) else { return false }
                found.append((Array(key.dropFirst(Self.mirrorKeyPrefix.count)), Array(value)))
                return true
            }
        }
        return found
    }

    static func decodeMirrorRecord(_ value: UnsafeRawBufferPointer, localPrefix: [UInt8]) throws -> MirrorRecord {
        do {
            return try JSONCoding.decoder.decode(MirrorRecord.self, from: Data(value))
        } catch {
            throw PersistentDefaultsError.decodingFailed(
                key: String(decoding: localPrefix, as: UTF8.self), type: "MirrorRecord",
                reason: "the mirror record in meta: \(error)")
        }
    }

    static func decodeMirrorRecord(_ value: [UInt8], localPrefix: [UInt8]) throws -> MirrorRecord {
        try value.withUnsafeBytes { try decodeMirrorRecord($0, localPrefix: localPrefix) }
    }
}

extension PersistentDefaults {
    /// The prefixes of this store that etcd mirrors own (see ``EtcdMirror``), by local prefix.
    public func mirroredPrefixes() throws -> [MirroredPrefix] {
        try core.environment.withRead { transaction in
            try core.mirroredPrefixes(in: transaction).map { entry in
                let record = try StoreCore.decodeMirrorRecord(entry.record, localPrefix: entry.localPrefix)
                return MirroredPrefix(
                    localPrefix: String(decoding: entry.localPrefix, as: UTF8.self), etcdPrefix: record.etcdPrefix,
                    endpoints: record.endpoints, clusterID: record.clusterID, revision: record.revision,
                    lastApplied: record.applied, lastContact: record.contact)
            }
        }
    }
}

extension WriteTransaction {
    /// Throws ``PersistentDefaultsError/ownedByMirror(key:localPrefix:etcdPrefix:)`` when a mirror
    /// owns `name` and this is not a mirror's own transaction. The owners are read once per
    /// transaction: one cursor step in `meta` when no mirror is recorded.
    @inline(__always)
    func checkNotMirrored(_ key: PersistentDefaults.Keys, in transaction: Transaction) throws {
        // Most stores have no mirror: once the owners are read, a write pays one test.
        if appliesMirror || mirrorOwners?.isEmpty == true { return }
        try checkMirrorOwners(key, in: transaction)
    }

    /// `checkNotMirrored` past its fast path.
    private func checkMirrorOwners(_ key: PersistentDefaults.Keys, in transaction: Transaction) throws {
        if mirrorOwners == nil { mirrorOwners = try core.mirroredPrefixes(in: transaction) }
        guard let owner = mirrorOwners?.first(where: { key.nameBytes.starts(with: $0.localPrefix) }) else { return }
        let etcdPrefix = (try? StoreCore.decodeMirrorRecord(owner.record, localPrefix: owner.localPrefix))?.etcdPrefix
        throw PersistentDefaultsError.ownedByMirror(
            key: key.name, localPrefix: String(decoding: owner.localPrefix, as: UTF8.self),
            etcdPrefix: etcdPrefix ?? "?")
    }
}
