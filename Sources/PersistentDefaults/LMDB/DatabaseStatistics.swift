import CLMDB

/// Statistics of one LMDB database. (`MDB_stat`)
public struct DatabaseStatistics: Sendable, Equatable {
    /// Size of a page in bytes. (`ms_psize`)
    public var pageSize: Int
    /// Depth of the B-tree. (`ms_depth`)
    public var depth: Int
    /// Internal pages. (`ms_branch_pages`)
    public var branchPages: Int
    /// Leaf pages. (`ms_leaf_pages`)
    public var leafPages: Int
    /// Overflow pages, holding large values. (`ms_overflow_pages`)
    public var overflowPages: Int
    /// Number of entries. (`ms_entries`)
    public var entries: Int
}

extension DatabaseStatistics {
    init(_ stat: MDB_stat) {
        self.init(
            pageSize: Int(stat.ms_psize), depth: Int(stat.ms_depth), branchPages: stat.ms_branch_pages,
            leafPages: stat.ms_leaf_pages, overflowPages: stat.ms_overflow_pages, entries: stat.ms_entries)
    }
}
