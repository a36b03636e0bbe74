import CPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The store's wake-up channel: the file `notify` of the store directory, mapped `MAP_SHARED` by
/// every process that uses the store. Each observing process (each store it observes) has a
/// **slot** in it: its process ID, a futex word on which only its watcher sleeps, and a 64-bit
/// mask of what it observes. After each commit, the writer looks at the slots in use and wakes
/// only the processes whose mask meets the commit's: a process observing other keys is not
/// woken at all.
///
/// Layout (host byte order): bytes 0–7 the header (magic `PDWK`, layout version 2); bytes 8–11
/// the number of slots ever claimed (the writers' scan limit); from byte 64, 1,020 slots of 16
/// bytes: process ID (`UInt32`, 0 when free), word (`UInt32`: a generation in bits 1–31 and, in
/// bit 0, "the watcher sleeps on it"), mask (`UInt64`).
///
/// The mask has one bit per key-name hash (bits 0–62, FNV-1a of the name's UTF-8 bytes modulo
/// 63) and bit 63 for "every commit" (commit and prefix observers). A commit's mask holds the
/// bits of its changed keys and bit 63; a commit whose keys are unknown (a write that logged no
/// record) has every bit. Hash collisions only cause a spare wake-up.
///
/// Per slot, the protocol of a single futex word: a waiter reads its word, checks the store,
/// sets bit 0 with a compare-and-swap (failing, and checking again, if a commit moved the word
/// meanwhile) and sleeps while the word still holds that value. A writer advances the generation
/// and clears bit 0 in one compare-and-swap, and calls `FUTEX_WAKE` only when bit 0 was set: no
/// wake-up can fall between a waiter's announcement and its sleep, and a slot whose process was
/// killed while asleep costs the next matching commit one `FUTEX_WAKE` that wakes nobody, later
/// ones a compare-and-swap. A process claiming a slot takes a free one or one whose process no
/// longer exists. With no slot in use, a commit pays one load and no system call.
///
/// `@unchecked Sendable`: the mapping is set up in `init` and unmapped in `deinit`; the shared
/// words are only accessed through atomic operations.
final class WakeChannel: @unchecked Sendable {
    /// The file's name in the store directory.
    static let fileName = "notify"
    /// The file's size: four pages.
    static let fileSize = 16_384
    /// The first 8 bytes of the file, read as one host-order `UInt64`: the magic `PDWK` in the
    /// low 32 bits and the layout version (2) in the high 32 bits.
    static let header = UInt64(0x4B57_4450) | UInt64(2) << 32
    static let slotsOffset = 64
    static let slotSize = 16
    static let capacity = (fileSize - slotsOffset) / slotSize
    /// The mask bit of "every commit".
    static let everyCommit: UInt64 = 1 << 63
    /// The mask of a commit whose changed keys are unknown.
    static let everything: UInt64 = ~0

    private let base: UnsafeMutableRawPointer
    private let processID = UInt32(truncatingIfNeeded: getpid())

    private init(base: UnsafeMutableRawPointer) { self.base = base }

    deinit { munmap(base, Self.fileSize) }

    /// The mask bit of a key name (its UTF-8 bytes).
    static func bit(forKeyNamed name: some Sequence<UInt8>) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in name { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return 1 << (hash % 63)
    }

    /// Opens the channel file of the store directory `directory` for reading and writing,
    /// creating it (mode 0600) when `create`; nil when it cannot be used — the store then works
    /// without it: writers wake nobody and observers check at their fallback interval.
    static func attach(directory: String, create: Bool) -> WakeChannel? {
        guard pd_futex_available() != 0 else { return nil }  // Other platforms poll.
        let path = directory + "/" + fileName
        var descriptor = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0), 0o600)
        if descriptor >= 0, create {
            // open applies the umask; the mode must not depend on it (like data.mdb and lock.mdb).
            _ = fchmod(descriptor, 0o600)  // Best effort: the mode from open is no wider than 0600.
        } else if descriptor < 0, create, errno == EEXIST {
            descriptor = open(path, O_RDWR | O_CLOEXEC)
        }
        guard descriptor >= 0 else { return nil }
        // The mapping stays valid after the descriptor is closed.
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        if info.st_size < fileSize {
            // A new file, or one another process is creating: both set the same size. A process
            // that may not create files does not change one either.
            guard create, ftruncate(descriptor, off_t(fileSize)) == 0 else { return nil }
        }
        guard let mapped = mmap(nil, fileSize, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0),
            mapped != MAP_FAILED
        else { return nil }
        let header = mapped.assumingMemoryBound(to: UInt64.self)
        // A zero header is a new file: the first process to get here writes it.
        _ = pd_atomic_cas_u64(header, 0, Self.header)
        guard pd_atomic_load_u64(header) == Self.header else {
            // Another layout (another version of the library): leave it alone and work without
            // the channel.
            munmap(mapped, fileSize)
            return nil
        }
        return WakeChannel(base: mapped)
    }

    private var slotCount: UnsafeMutablePointer<UInt32> {
        base.advanced(by: 8).assumingMemoryBound(to: UInt32.self)
    }

    fileprivate func processID(ofSlot index: Int) -> UnsafeMutablePointer<UInt32> {
        base.advanced(by: Self.slotsOffset + index * Self.slotSize).assumingMemoryBound(to: UInt32.self)
    }

    fileprivate func word(ofSlot index: Int) -> UnsafeMutablePointer<UInt32> {
        base.advanced(by: Self.slotsOffset + index * Self.slotSize + 4).assumingMemoryBound(to: UInt32.self)
    }

    fileprivate func mask(ofSlot index: Int) -> UnsafeMutablePointer<UInt64> {
        base.advanced(by: Self.slotsOffset + index * Self.slotSize + 8).assumingMemoryBound(to: UInt64.self)
    }

    /// A waiter of this process: a free slot, or one whose process is gone; nil when all are
    /// taken by live processes (the watcher then checks at its fallback interval).
    func claimWaiter() -> Waiter? {
        for index in 0..<Self.capacity {
            let owner = processID(ofSlot: index)
            let current = pd_atomic_load_u32(owner)
            guard current == 0 || pd_process_exists(Int32(bitPattern: current)) == 0 else { continue }
            guard pd_atomic_cas_u32(owner, current, processID) != 0 else { continue }
            // A dead owner's mask may still be set: until here it only costs a spare wake-up.
            pd_atomic_store_u64(mask(ofSlot: index), 0)
            var count = pd_atomic_load_u32(slotCount)
            while count < UInt32(index + 1), pd_atomic_cas_u32(slotCount, count, UInt32(index + 1)) == 0 {
                count = pd_atomic_load_u32(slotCount)
            }
            return Waiter(channel: self, slot: index)
        }
        return nil
    }

    /// After a commit: wakes the other processes whose mask meets `commitMask`. Never fails:
    /// the channel is an optimisation, and observers also check at their fallback interval.
    func signal(_ commitMask: UInt64) {
        let count = min(Int(pd_atomic_load_u32(slotCount)), Self.capacity)
        for index in 0..<count {
            let owner = pd_atomic_load_u32(processID(ofSlot: index))
            // This process's own observers get its commits from the committing thread.
            guard owner != 0, owner != processID, pd_atomic_load_u64(mask(ofSlot: index)) & commitMask != 0 else {
                continue
            }
            Self.advance(word(ofSlot: index), waking: false)
        }
    }

    /// Advances a word's generation and clears its sleeper bit; wakes the sleeper if it had one
    /// (all threads when `waking` everybody is asked, else one). The wake-up's result is
    /// ignored on purpose: it cannot fail for a mapped word, and a lost one only delays
    /// observers until their fallback check.
    fileprivate static func advance(_ word: UnsafeMutablePointer<UInt32>, waking everybody: Bool) {
        var current = pd_atomic_load_u32(word)
        // (x | 1) + 1 is the next even value: the generation advances and bit 0 is cleared.
        while pd_atomic_cas_u32(word, current, (current | 1) &+ 1) == 0 {
            current = pd_atomic_load_u32(word)
        }
        if current & 1 != 0 { _ = everybody ? pd_futex_wake_all(word) : pd_futex_wake_one(word) }
    }

    /// One watcher's place: a slot of the store's channel, or a word private to the process.
    ///
    /// `@unchecked Sendable`: the word and mask are accessed only atomically; the private memory
    /// is allocated in `init` and freed in `deinit`.
    final class Waiter: @unchecked Sendable {
        private let channel: WakeChannel?
        private let slot: Int
        private let word: UnsafeMutablePointer<UInt32>
        private let mask: UnsafeMutablePointer<UInt64>

        fileprivate init(channel: WakeChannel, slot: Int) {
            self.channel = channel
            self.slot = slot
            word = channel.word(ofSlot: slot)
            mask = channel.mask(ofSlot: slot)
        }

        /// A word that only this process uses: `wait` sleeps until the timeout or `wake()`.
        init() {
            channel = nil
            slot = -1
            let memory = UnsafeMutableRawPointer.allocate(byteCount: 16, alignment: 8)
            memory.initializeMemory(as: UInt8.self, repeating: 0, count: 16)
            word = memory.assumingMemoryBound(to: UInt32.self)
            mask = memory.advanced(by: 8).assumingMemoryBound(to: UInt64.self)
        }

        deinit {
            if let channel {
                pd_atomic_store_u64(mask, 0)
                pd_atomic_store_u32(channel.processID(ofSlot: slot), 0)
            } else {
                UnsafeMutableRawPointer(word).deallocate()
            }
        }

        /// Whether writers of other processes can wake this waiter.
        var isShared: Bool { channel != nil }

        /// Adds `bits` to what wakes this waiter: before the snapshot of a new observer, so a
        /// commit the snapshot misses sees them.
        func add(_ bits: UInt64) { pd_atomic_or_u64(mask, bits) }

        /// Sets what wakes this waiter (after observers were removed).
        func set(_ bits: UInt64) { pd_atomic_store_u64(mask, bits) }

        /// The word's current value, to pass to ``wait(from:timeoutNanoseconds:)`` after checking
        /// the store.
        func current() -> UInt32 { pd_atomic_load_u32(word) }

        /// Announces the sleep and sleeps while the word holds `seen`, at most
        /// `timeoutNanoseconds`; returns at once when the word moved since `seen` was read.
        func wait(from seen: UInt32, timeoutNanoseconds: Int64) {
            var expected = seen
            if seen & 1 == 0 {
                // Fails when a commit moved the word: return and let the caller check again.
                guard pd_atomic_cas_u32(word, seen, seen | 1) != 0 else { return }
                expected = seen | 1
            }
            // EAGAIN (the word moved), ETIMEDOUT and EINTR all mean: check the store again.
            _ = pd_futex_wait(word, expected, timeoutNanoseconds)
        }

        /// Moves the word and wakes the sleeper: `stop()` of the watcher.
        func wake() { WakeChannel.advance(word, waking: true) }
    }
}
