/// This process's recent commits that changed pages, by LMDB transaction ID, and whether each
/// appended a log record: the watcher counts how many of the commits it sees are this process's
/// own (their committing threads deliver them) and how many of those logged nothing.
///
/// By ID, not by a counter: a commit is recorded just after `mdb_txn_commit` returns, so a
/// watcher can see it in a snapshot before it is recorded. Counted by a counter, such a commit
/// was missed once and then counted again at the next check, where it hid one other process's
/// commit: that commit was never delivered (found by a test that failed 9 runs of 10). Counted
/// by ID, a commit recorded late is only taken for another process's once — a spare delivery,
/// never a lost one — and a range already checked is never counted again.
///
/// At most `capacity` IDs are kept; commits forgotten beyond that are likewise taken for other
/// processes'.
final class LocalCommits: Sendable {
    /// The recorded commits in a ring: each slot a transaction ID (0: empty) whose sign bit
    /// says that the commit logged nothing.
    private struct Ring {
        var slots = [Int](repeating: 0, count: LocalCommits.capacity)
        var next = 0
    }

    /// A `pthread` mutex (`Locked`): ThreadSanitizer sees it.
    private let ring = Locked(Ring())
    static let capacity = 1_024

    /// Records a commit of this process that changed pages; call after it succeeded.
    func record(transactionID: Int, logged: Bool) {
        ring.withLock { ring in
            ring.slots[ring.next] = logged ? transactionID : -transactionID
            ring.next = (ring.next + 1) & (Self.capacity - 1)
        }
    }

    /// How many recorded commits have IDs in `range` (after the last checked ID, up to a
    /// snapshot's), and how many of those logged no record. Forgets the IDs up to the range's
    /// end: the caller never asks about them again.
    func count(in range: ClosedRange<Int>) -> (all: Int, unlogged: Int) {
        ring.withLock { ring in
            var all = 0
            var unlogged = 0
            for index in ring.slots.indices where ring.slots[index] != 0 {
                let id = abs(ring.slots[index])
                if range.contains(id) {
                    all += 1
                    if ring.slots[index] < 0 { unlogged += 1 }
                }
                if id <= range.upperBound { ring.slots[index] = 0 }
            }
            return (all, unlogged)
        }
    }
}
