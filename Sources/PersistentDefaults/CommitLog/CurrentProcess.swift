import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The ID of this process, for the commit records it writes, without a `getpid()` system call
/// per commit (glibc has not cached it since 2.25).
///
/// The ID is read once and kept; a `pthread_atfork` child handler forgets it, so a forked child
/// reads its own ID on its first commit instead of writing its parent's.
enum CurrentProcess {
    /// This process's ID (`getpid()`).
    static var id: Int32 {
        _ = forkHandler
        let kept = cachedID.load(ordering: .relaxed)
        if kept != 0 { return kept }
        let fresh = getpid()
        cachedID.store(fresh, ordering: .relaxed)
        return fresh
    }

    /// Registers the child handler once per process, on first use.
    private static let forkHandler: Void = {
        // Ignored on purpose: pthread_atfork fails only without memory for its table (ENOMEM);
        // a child that forks without exec and then commits would then log its parent's ID, a
        // field that only informs (`pdinspect log`), never decides anything.
        _ = pthread_atfork(nil, nil) { cachedID.store(0, ordering: .relaxed) }
    }()
}

/// `CurrentProcess.id`'s kept value; 0 when not yet read in this process.
private let cachedID = Atomic<Int32>(0)
