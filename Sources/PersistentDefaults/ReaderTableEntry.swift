/// One slot of a store's reader lock table: a process that holds, or keeps ready, a read
/// transaction. `pdinspect readers` lists them.
///
/// ```swift
/// for reader in store.readerTableEntries() where reader.processID != getpid() {
///     print(reader.processID, reader.transactionID.map { "reads at \($0)" } ?? "idle")
/// }
/// ```
///
/// A slot whose process died stays until ``PersistentDefaults/clearStaleReaders()`` (or the next
/// open) frees it; a long-lived ``transactionID`` far behind ``StoreStatistics/lastTransactionID``
/// keeps old pages from being reused, so the file grows.
public struct ReaderTableEntry: Sendable, Hashable {
    /// The process that owns the slot. (`mr_pid`)
    public var processID: Int32
    /// The thread that took the slot, as the system numbers threads (`pthread_self`). (`mr_tid`)
    public var thread: UInt64
    /// The LMDB transaction ID of the snapshot being read; nil for an idle slot that its process
    /// keeps for its next read. (`mr_txnid`)
    public var transactionID: Int?

    /// Creates an entry.
    public init(processID: Int32, thread: UInt64, transactionID: Int?) {
        self.processID = processID
        self.thread = thread
        self.transactionID = transactionID
    }

    /// The entries of a table as `mdb_reader_list` prints it: a header, then one line per slot,
    /// `pid thread txnid`, the thread in hexadecimal and `-` as the txnid of an idle slot (mdb.c).
    /// Lines of any other shape (the header, "(no active readers)") are skipped.
    static func parse(_ table: String) -> [ReaderTableEntry] {
        table.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 3, let pid = Int32(fields[0]), let thread = UInt64(fields[1], radix: 16) else {
                return nil
            }
            if fields[2] == "-" { return ReaderTableEntry(processID: pid, thread: thread, transactionID: nil) }
            guard let transactionID = Int(fields[2]) else { return nil }
            return ReaderTableEntry(processID: pid, thread: thread, transactionID: transactionID)
        }
    }
}
