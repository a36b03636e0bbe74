import Foundation

/// What `pdinspect stat` prints: the store's format, size and LMDB facts.
public struct StoreStatistics: Sendable, Equatable {
    /// The on-disk format version stored in the file.
    public var formatVersion: UInt32
    /// The memory map's current size in bytes. (`me_mapsize`)
    public var mapSize: Int
    /// Bytes of the map in use: (last page + 1) × page size. (`me_last_pgno`)
    public var usedBytes: Int
    /// The page size in bytes.
    public var pageSize: Int
    /// The ID of the last committed LMDB transaction. (`me_last_txnid`)
    public var lastTransactionID: Int
    /// Reader slots in the lock file. (`me_maxreaders`)
    public var maxReaders: Int
    /// Reader slots in use. (`me_numreaders`)
    public var readers: Int
    /// The values database.
    public var values: DatabaseStatistics
    /// The commit-log database.
    public var log: DatabaseStatistics
    /// The oldest and newest sequence numbers in the log; nil when it is empty. A log key that is
    /// not a sequence number (written by another tool; ``PersistentDefaults/verify()`` reports
    /// it) is left out.
    public var logRange: ClosedRange<UInt64>?
    /// Size of `data.mdb` in bytes.
    public var dataFileSize: Int
    /// Size of `lock.mdb` in bytes; 0 when the store was opened without a lock file.
    public var lockFileSize: Int
}

extension PersistentDefaults {
    /// The store's format, size and LMDB statistics, read in one snapshot.
    public func statistics() throws -> StoreStatistics {
        let environment = core.environment
        return try environment.withRead { transaction in
            let info = environment.info(during: transaction)
            let values = try transaction.statistics(core.databases.values)
            return StoreStatistics(
                formatVersion: StoreCore.formatVersion, mapSize: info.mapSize,
                usedBytes: (info.lastPage + 1) * values.pageSize, pageSize: values.pageSize,
                lastTransactionID: info.lastTransactionID, maxReaders: info.maxReaders, readers: info.readers,
                values: values, log: try transaction.statistics(core.databases.log),
                logRange: try core.logRange(in: transaction),
                dataFileSize: Self.fileSize(path + "/" + StoreFiles.dataFile),
                lockFileSize: Self.fileSize(path + "/" + StoreFiles.lockFile))
        }
    }

    private static func fileSize(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? 0
    }

    /// The reader lock table as LMDB prints it (`mdb_reader_list`): pid, thread and txnid per
    /// slot. ``readerTableEntries()`` gives the same slots as values.
    public func readerTable() -> String { core.environment.readerTable() }

    /// The slots of the reader lock table in use, this process's included; empty for a store
    /// opened without a lock file.
    ///
    /// ```swift
    /// let others = store.readerTableEntries().filter { $0.processID != getpid() }
    /// ```
    public func readerTableEntries() -> [ReaderTableEntry] {
        ReaderTableEntry.parse(core.environment.readerTable())
    }

    /// Frees reader slots left by processes that died; returns how many (`mdb_reader_check`).
    public func clearStaleReaders() throws -> Int { try core.environment.clearStaleReaders() }

    /// Writes a consistent copy of the store into the directory `destination`, which must exist
    /// and be empty; with `compact`, free pages are left out (`mdb_env_copyfd2` with `MDB_CP_COMPACT`).
    /// The copy's `data.mdb` has mode 0600 from its creation, as the store's own files, whatever
    /// the umask; when the copy fails, no `data.mdb` is left in `destination`. When this returns
    /// the copy is on disk: its `data.mdb` and the directory entry are `fsync`ed, so a power cut
    /// right after it leaves the whole copy.
    ///
    /// ```swift
    /// try FileManager.default.createDirectory(atPath: backup, withIntermediateDirectories: true)
    /// try store.copy(to: backup, compact: true)
    /// ```
    public func copy(to destination: String, compact: Bool) throws {
        try core.environment.copy(to: destination, compact: compact)
    }

    /// Checks the whole store: every value decodes (as its key's declared type, for a declared
    /// key; a `json` value's text is JSON), every declaration and log record decodes, the log's sequence numbers have no gaps,
    /// each key's newest logged change matches the data, and every page of the file is a meta
    /// page, a page of a database or on LMDB's free-page list, once (a free list that names a
    /// page in use is what a power cut of a `.bounded` store can leave; only a writer reads it).
    /// Returns one line per problem; an empty array means the store is consistent. A page that
    /// LMDB cannot read (it fails an assertion or faults on it) throws
    /// `lmdb(code: .assertionFailed or .faulted, …)` instead of ending the process.
    public func verify() throws -> [String] {
        try verifyContents() + (try core.pageAccountingProblem().map { [$0] } ?? [])
    }

    /// `value`, for ``verify()``, when it decodes: a `json` value must also be JSON, which
    /// decoding the tag and text alone does not check (the library writes only JSON; another
    /// client may not, and no `Codable` read, `pdinspect export` or `dump` takes it then).
    private static func checked(_ value: StoredValue) throws(StoredValueError) -> StoredValue {
        if case .json(let text) = value, JSONValue.parse(text) == nil {
            throw StoredValueError("json payload does not parse as JSON")
        }
        return value
    }

    private func verifyContents() throws -> [String] {
        try core.environment.withRead { transaction in
            var problems: [String] = []
            // By the names' bytes: `String` equality would merge NFC and NFD forms of a name.
            var current: [[UInt8]: [UInt8]] = [:]
            try transaction.forEach(core.databases.values) { key, value in
                guard let name = String(validating: key, as: UTF8.self) else {
                    problems.append("a key name is not valid UTF-8: \(Array(key))")
                    return true
                }
                do throws(StoredValueError) {
                    _ = try Self.checked(try StoredValue(encodedValue: value))
                } catch {
                    problems.append("value of \"\(name)\": \(error)")
                }
                current[Array(name.utf8)] = Array(value)
                return true
            }
            // A stored value must decode as its key's declared type (`declare`).
            try core.forEachDeclaration(in: transaction) { result in
                switch result {
                case .failure(let error):
                    problems.append(error.description)
                case .success(let declaration):
                    // A value that does not decode is reported above.
                    guard let bytes = current[Array(declaration.name.utf8)],
                        let value = try? Self.checked(try StoredValue(encodedValue: bytes)),
                        let mismatch = declaration.mismatch(of: value)
                    else { return }
                    problems.append("value of \"\(declaration.name)\": \(mismatch)")
                }
            }
            var newest: [[UInt8]: (name: String, value: [UInt8]?)] = [:]
            var previous: UInt64?
            try transaction.forEach(core.databases.log) { key, value in
                let number: UInt64
                do throws(PersistentDefaultsError) {
                    number = try logSequence(fromKey: key)
                } catch {
                    // The record of a foreign key is not read: one problem per foreign key.
                    problems.append(error.description)
                    return true
                }
                if let previous, number != previous + 1 {
                    problems.append("log jumps from \(previous) to \(number)")
                }
                previous = number
                do {
                    for change in try CommitRecord(sequence: number, bytes: value).changes {
                        newest[Array(change.key.utf8)] = (change.key, change.encodedValue)
                    }
                } catch {
                    problems.append("\(error)")
                }
                return true
            }
            for (nameBytes, logged) in newest.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) })
            where current[nameBytes] != logged.value {
                problems.append("\"\(logged.name)\": the newest logged change does not match the stored value")
            }
            return problems
        }
    }
}

extension Snapshot {
    /// ``StoreStatistics/logRange`` as this snapshot sees it (`pdinspect describe`).
    package func logRange() throws -> ClosedRange<UInt64>? { try core.logRange(in: try live()) }
}

extension StoreCore {
    /// The oldest and newest sequence numbers in `transaction`'s log; nil when it is empty.
    func logRange(in transaction: Transaction) throws -> ClosedRange<UInt64>? {
        // A log key that is not a sequence number (another tool wrote it; `verify()` reports
        // it) is left out rather than failing the statistics.
        var first: UInt64?
        try transaction.forEach(databases.log) { key, _ in
            first = try? logSequence(fromKey: key)
            return false
        }
        let last = try? lastSequence(in: transaction)
        return first.map { $0...max($0, last ?? $0) }
    }
}

extension PersistentDefaults {
    /// Stores an untyped value under `name` in its own transaction, as `pdinspect set` does.
    public func setStoredValue(_ value: StoredValue, named name: String) throws {
        try write { try $0.setStoredValue(value, named: name) }
    }

    /// Removes the key named `name`; returns whether it was stored.
    @discardableResult
    public func removeValue(named name: String) throws -> Bool {
        try write { transaction in
            let key = Keys(name: name)
            let existed = try transaction.contains(key)
            try transaction.remove(key)
            return existed
        }
    }
}
