import Foundation

/// How the mirror changes the store. Every function here runs on one of the mirror's own threads
/// (or a request thread), never in an async context: each is one synchronous LMDB write
/// transaction, begun and ended on that thread.
extension EtcdMirror {
    /// Applies the events of one etcd revision in one transaction, unless the store already
    /// holds that revision (another process of this host applied it).
    func apply(revision: Int64, events: [EtcdWatchMessage.Event], clusterID: String) throws {
        var failures: [PersistentDefaultsError] = []
        let core = store.core
        let recorded: Int64 = try core.write { writer in
            writer.appliesMirror = true
            failures.removeAll()  // The body runs again when the map grows.
            let transaction = try writer.live()
            var record = try ownRecord(in: transaction)
            guard record.revision < revision else { return record.revision }
            var unparsable = record.unparsableNames
            for event in events {
                guard let name = localName(ofEtcdKey: event.kv.key) else { continue }
                unparsable[name] = nil
                do {
                    let key = try localKey(named: name)
                    if event.isDelete {
                        try writer.replace(key, with: nil, in: transaction)
                    } else {
                        let bytes = try parse(event.kv.value, name: key.name, etcdKey: event.kv.key, revision: revision)
                        try core.checkSize(bytes, of: key.name)
                        try writer.replace(key, with: bytes, in: transaction)
                    }
                } catch let error as PersistentDefaultsError
                    where error.concernsOnlyItsRequest
                {
                    failures.append(error)
                    // The key keeps its last good value, which a write must not take for etcd's.
                    if !event.isDelete { unparsable[name] = revision }
                }
            }
            record.unparsableNames = unparsable
            try recordApplied(revision, of: clusterID, in: record, writer: writer)
            return revision
        }
        for failure in failures { core.reporter.report(failure) }
        status.withLock { $0.contactRecorded = .now }
        noteApplied(recorded)
    }

    /// Makes the local copy equal to `snapshot` (etcd's prefix at one revision) in one
    /// transaction. Applied only when the store holds an older revision (or one of another
    /// cluster) — or, for a repair (`repairAt`), exactly that revision. Returns the names it
    /// changed, nil when it applied nothing because the store moved on. `epoch`: the
    /// ``Status/epoch`` when the caller read the revision it repairs.
    @discardableResult
    func applySnapshot(_ snapshot: EtcdRangeResponse, repairAt: Int64? = nil, epoch: Int? = nil) throws -> [String]? {
        let revision = snapshot.header.revision
        let (wanted, failures) = desiredValues(snapshot)
        let core = store.core
        var changed: [String] = []
        let recorded: Int64? = try core.write { writer in
            writer.appliesMirror = true
            changed.removeAll()
            let transaction = try writer.live()
            var record = try ownRecord(in: transaction)
            let sameCluster = record.clusterID.isEmpty || record.clusterID == snapshot.header.clusterID
            if let repairAt {
                guard record.revision == repairAt, sameCluster else { return nil }
            } else {
                guard record.revision < revision || !sameCluster else { return record.revision }
            }
            changed = try makeLocalCopyEqual(to: wanted, writer: writer, in: transaction)
            record.unparsableNames = wanted.unparsable
            if repairAt == nil {
                record.revision = revision
                record.clusterID = snapshot.header.clusterID
                record.applied = Date()
            }
            record.contact = Date()
            try core.recordMirror(record, localPrefix: localPrefixBytes, in: transaction)
            writer.logsWithoutValueChanges = repairAt == nil || !changed.isEmpty
            return repairAt ?? revision
        }
        for failure in failures { core.reporter.report(failure) }
        guard let recorded else { return nil }
        status.withLock { $0.contactRecorded = .now }
        noteApplied(recorded, epoch: epoch)
        return changed
    }

    /// Makes the local copy equal to `snapshot` once etcd's history went back under the same
    /// cluster ID — a member restarted without its data, or restored from an older backup,
    /// keeps its cluster ID and starts its revisions over — so that the store records a newer
    /// revision than etcd's current one. `before` is this mirror's record as read before the
    /// request that showed etcd behind it.
    ///
    /// Applied in one transaction (one commit, also when no value changed), recording the
    /// snapshot's revision, only when the store still holds `before`: a revision of the new
    /// history that another mirror of the store (another process) applied meanwhile is never
    /// taken back. When another mirror copied etcd's new state already, the snapshot is applied
    /// only if newer, as ``applySnapshot(_:repairAt:epoch:)`` does. The changed keys are reported
    /// (``PersistentDefaultsError/mirrorRepaired(localPrefix:revision:keys:)``) by the mirror that
    /// made the copy, and the revision the store then holds is noted, though lower than the one
    /// noted before. Returns false, changing nothing, when the store moved meanwhile and still
    /// records a newer revision than the snapshot's: read the record and etcd again.
    func applyAfterHistoryWentBack(_ snapshot: EtcdRangeResponse, before: MirrorRecord) throws -> Bool {
        let revision = snapshot.header.revision
        let (wanted, failures) = desiredValues(snapshot)
        let core = store.core
        var repaired: [String]?
        let recorded: Int64? = try core.write { writer in
            writer.appliesMirror = true
            repaired = nil  // The body runs again when the map grows.
            let transaction = try writer.live()
            var record = try ownRecord(in: transaction)
            let sameCluster = record.clusterID.isEmpty || record.clusterID == snapshot.header.clusterID
            if sameCluster, record.revision > revision {
                guard record.revision == before.revision, record.applied == before.applied else { return nil }
            } else if sameCluster, record.revision == revision {
                return revision  // Another mirror of the store made this copy.
            }
            let changed = try makeLocalCopyEqual(to: wanted, writer: writer, in: transaction)
            if sameCluster, record.revision > revision { repaired = changed }
            record.unparsableNames = wanted.unparsable
            try recordApplied(revision, of: snapshot.header.clusterID, in: record, writer: writer)
            return revision
        }
        for failure in failures { core.reporter.report(failure) }
        guard let recorded else { return false }
        status.withLock { $0.contactRecorded = .now }
        noteHistoryWentBack(to: recorded)
        if let repaired {
            core.reporter.report(
                PersistentDefaultsError.mirrorRepaired(localPrefix: localPrefix, revision: revision, keys: repaired))
        }
        return true
    }

    /// Records in `writer`'s transaction that the store holds etcd's `revision` of the cluster
    /// `clusterID` (an empty one keeps the recorded cluster), applied and in contact now: one
    /// etcd revision, one logged commit, also when no value changed.
    private func recordApplied(
        _ revision: Int64, of clusterID: String, in record: MirrorRecord, writer: WriteTransaction
    ) throws {
        var record = record
        record.revision = revision
        record.clusterID = clusterID.isEmpty ? record.clusterID : clusterID
        record.applied = Date()
        record.contact = record.applied
        try store.core.recordMirror(record, localPrefix: localPrefixBytes, in: try writer.live())
        writer.logsWithoutValueChanges = true
    }

    /// Makes the names under the local prefix hold exactly the values of `wanted`, in
    /// `transaction`; a name whose etcd value does not parse keeps its last good value. Returns
    /// the names changed.
    private func makeLocalCopyEqual(
        to wanted: CatchUp, writer: WriteTransaction, in transaction: Transaction
    ) throws -> [String] {
        var changed: [String] = []
        for name in try localNames(in: transaction) where wanted.values[name] == nil {
            guard wanted.unparsable[name] == nil else { continue }
            let key = PersistentDefaults.Keys(name: String(decoding: name, as: UTF8.self))
            try writer.replace(key, with: nil, in: transaction)
            changed.append(key.name)
        }
        for (name, bytes) in wanted.values.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            let key = PersistentDefaults.Keys(name: String(decoding: name, as: UTF8.self))
            if try store.core.encodedValue(named: name, in: transaction) != bytes {
                try writer.replace(key, with: bytes, in: transaction)
                changed.append(key.name)
            }
        }
        return changed
    }

    /// The values a snapshot asks for, by local name, and the names whose value does not parse
    /// (reported, left as they are).
    func desiredValues(_ snapshot: EtcdRangeResponse) -> (CatchUp, [PersistentDefaultsError]) {
        var wanted = CatchUp(revision: snapshot.header.revision, values: [:], unparsable: [:])
        var failures: [PersistentDefaultsError] = []
        for kv in snapshot.kvs {
            guard let name = localName(ofEtcdKey: kv.key) else { continue }
            do {
                let key = try localKey(named: name)
                let bytes = try parse(kv.value, name: key.name, etcdKey: kv.key, revision: kv.modRevision)
                try store.core.checkSize(bytes, of: key.name)
                wanted.values[name] = bytes
            } catch {
                wanted.unparsable[name] = kv.modRevision
                failures.append(
                    error as? PersistentDefaultsError
                        ?? .decodingFailed(key: String(decoding: name, as: UTF8.self), type: "", reason: "\(error)"))
            }
        }
        return (wanted, failures)
    }

    /// Whether the local copy holds exactly the values of `wanted` (ignoring unparsable ones).
    func localCopyMatches(_ wanted: CatchUp) throws -> Bool {
        try store.core.environment.withRead { transaction in
            var seen = 0
            var matches = true
            try localPrefixBytes.withUnsafeBytes { start in
                try transaction.forEach(store.core.databases.values, from: start) { key, value in
                    guard key.starts(with: localPrefixBytes) else { return false }
                    let name = Array(key)
                    if wanted.unparsable[name] != nil { return true }
                    guard let expected = wanted.values[name], expected.elementsEqual(value) else {
                        matches = false
                        return false
                    }
                    seen += 1
                    return true
                }
            }
            let expectedCount = wanted.values.keys.count { wanted.unparsable[$0] == nil }
            return matches && seen == expectedCount
        }
    }

    /// Adds to the store's record the names whose etcd value, put at or before the recorded
    /// revision, does not parse in `wanted` (etcd's prefix at a revision not older than the
    /// recorded one): a record written by a library that did not keep them lacks them, and the
    /// watch, resuming after the recorded revision, never delivers those values again. Writes
    /// only when one is missing.
    func learnUnparsable(from wanted: CatchUp) throws {
        let missing = { (record: MirrorRecord) -> [[UInt8]: Int64] in
            guard record.revision <= wanted.revision else { return [:] }  // The store moved on.
            let known = record.unparsableNames
            return MirrorRecord.storable(wanted.unparsable).filter { name, revision in
                revision <= record.revision && known[name] == nil
            }
        }
        let core = store.core
        guard try !core.environment.withRead({ try missing(ownRecord(in: $0)) }).isEmpty else { return }
        try core.write { writer in
            let transaction = try writer.live()
            var record = try ownRecord(in: transaction)
            let learnt = missing(record)
            guard !learnt.isEmpty else { return }
            record.unparsableNames.merge(learnt) { known, _ in known }
            try core.recordMirror(record, localPrefix: localPrefixBytes, in: transaction)
        }
    }

    /// Whether `record` holds exactly the names that do not parse in `wanted` (etcd's prefix at
    /// the recorded revision).
    func recordsUnparsable(of wanted: CatchUp, in record: MirrorRecord) -> Bool {
        record.unparsableNames == MirrorRecord.storable(wanted.unparsable)
    }

    /// The names under the local prefix, in byte order.
    private func localNames(in transaction: Transaction) throws -> [[UInt8]] {
        var names: [[UInt8]] = []
        try localPrefixBytes.withUnsafeBytes { start in
            try transaction.forEach(store.core.databases.values, from: start) { key, _ in
                guard key.starts(with: localPrefixBytes) else { return false }
                names.append(Array(key))
                return true
            }
        }
        return names
    }

    /// This mirror's record; one made from scratch if another tool removed it.
    func ownRecord(in transaction: Transaction) throws -> MirrorRecord {
        try store.core.mirrorRecord(localPrefix: localPrefixBytes, in: transaction)
            ?? MirrorRecord(etcdPrefix: etcdPrefix, endpoints: client.endpoints)
    }

    /// The stored bytes of an etcd value in the typed JSON form.
    private func parse(_ value: Data, name: String, etcdKey: Data, revision: Int64) throws -> [UInt8] {
        do {
            return try StoredValue(typedJSON: value).encodedValue
        } catch {
            throw PersistentDefaultsError.decodingFailed(
                key: name,
                type: "a value from etcd (key \(String(decoding: etcdKey, as: UTF8.self)), revision \(revision))",
                reason: "\(error.description); the key keeps its last value")
        }
    }

    /// Writes the time of the last contact with etcd (and the revision a progress notification
    /// vouched for) to `meta`, at most every ``Options/contactRecordInterval``.
    func recordContact(progressRevision: Int64?) {
        let due = status.withLock { status in
            guard ContinuousClock.now - status.contactRecorded >= options.contactRecordInterval else { return false }
            status.contactRecorded = .now
            return true
        }
        guard due else { return }
        let epoch = status.withLock { $0.epoch }
        do {
            let core = store.core
            let recorded: Int64 = try core.write { writer in
                let transaction = try writer.live()
                var record = try ownRecord(in: transaction)
                record.contact = Date()
                // Every change of the prefix up to a progress notification's revision was
                // delivered: resuming after it loses nothing and avoids a re-read after a
                // compaction of an idle prefix. It changes no value, so it is not logged.
                if let progressRevision, progressRevision > record.revision, record.revision > 0 {
                    record.revision = progressRevision
                }
                try core.recordMirror(record, localPrefix: localPrefixBytes, in: transaction)
                return record.revision
            }
            noteApplied(recorded, epoch: epoch)
        } catch {
            store.core.reporter.report(error)
        }
    }
}
