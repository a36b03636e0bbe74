import CPlatform
import Synchronization

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
/// bit 0, "the watcher sleeps on it"), mask (`UInt64`). From byte 16,384, the **announcements**
/// (see ``announce(sequence:mask:)``): the first and last log sequence of the current unbroken run
/// of announced and confirmed commits (`UInt64` each), then from byte 16,448 the last announced sequence whose
/// commit carried each mask bit (64 × `UInt64`). The file is 20,480 bytes; a 16,384-byte file is
/// one an older version made: it is grown when this process may write it, else used without the
/// announcements.
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
/// A slot's owner also holds an open-file-description lock on one byte of the file (at
/// `fileSize` + the slot's index, past its end) while it owns the slot: a process ID tells
/// nothing about a process in another PID namespace (containers that share the store's
/// directory), where `kill(pid, 0)` says ESRCH for a live owner. A slot whose byte another
/// description holds is never taken over; the kernel drops the lock when its owner dies.
///
/// `@unchecked Sendable`: the mapping is set up in `init` and unmapped in `deinit`; the shared
/// words are only accessed through atomic operations.
final class WakeChannel: @unchecked Sendable {
    /// The file's name in the store directory.
    static let fileName = "notify"
    /// The file's size: five pages, the slots' four and the announcements'.
    static let fileSize = 20_480
    /// Where the slots end and the announcements begin: the size of the file an older version
    /// made (which never shrinks a file of at least this size).
    static let slotsEnd = 16_384
    static let announcementsOffset = 16_384
    static let bitLastOffset = 16_448
    /// The first 8 bytes of the file, read as one host-order `UInt64`: the magic `PDWK` in the
    /// low 32 bits and the layout version (2) in the high 32 bits.
    static let header = UInt64(0x4B57_4450) | UInt64(2) << 32
    static let slotsOffset = 64
    static let slotSize = 16
    static let capacity = (slotsEnd - slotsOffset) / slotSize
    /// The mask bit of "every commit".
    static let everyCommit: UInt64 = 1 << 63
    /// The mask of a commit whose changed keys are unknown.
    static let everything: UInt64 = ~0

    private let base: UnsafeMutableRawPointer
    /// The mapped length: `fileSize`, or `slotsEnd` for an older version's file that this
    /// process may not grow (then it has no announcements).
    private let length: Int
    /// The file, open for reading and writing while the channel lives: its description holds
    /// the lock of the slot this process claimed (see `claimWaiter`).
    private let descriptor: Int32
    private let processID = UInt32(truncatingIfNeeded: getpid())
    /// The slot this channel claimed, -1 before: writers skip it (this process's observers get
    /// its commits from the committing thread). By slot, not by process ID: in another PID
    /// namespace a different process can have this process's ID.
    private let ownSlot = Atomic<Int>(-1)

    private init(base: UnsafeMutableRawPointer, length: Int, descriptor: Int32) {
        self.base = base
        self.length = length
        self.descriptor = descriptor
    }

    deinit {
        munmap(base, length)
        close(descriptor)  // Releases the slot's lock, if the waiter did not.
    }

    /// Whether the file holds the announcements.
    var hasAnnouncements: Bool { length >= Self.fileSize }

    /// The mask bit of a key name (its UTF-8 bytes).
    static func bit(forKeyNamed name: some Sequence<UInt8>) -> UInt64 { bit(ofNameHash: nameHash(name)) }

    /// The 64-bit FNV-1a hash of a key name (its UTF-8 bytes), from which its mask bit is taken.
    static func nameHash(_ name: some Sequence<UInt8>) -> UInt64 { FNV1a.hash(name) }

    /// The mask bit of a name whose ``nameHash(_:)`` is `hash`.
    static func bit(ofNameHash hash: UInt64) -> UInt64 { 1 << (hash % 63) }

    /// Opens the channel file of the store directory `directory` for reading and writing,
    /// creating it (mode 0600) when `create`; nil when it cannot be used — the store then works
    /// without it: writers wake nobody and observers check at their fallback interval.
    static func attach(directory: String, create: Bool) -> WakeChannel? {
        guard pd_futex_available() != 0 else { return nil }  // Other platforms poll.
        let path = directory + "/" + fileName
        var descriptor = open(path, O_RDWR | O_CLOEXEC)
        if descriptor < 0, errno == ENOENT, create {
            makeFile(at: path)
            descriptor = open(path, O_RDWR | O_CLOEXEC)
        }
        guard descriptor >= 0 else { return nil }
        // Kept open by the channel (its slot's lock lives on this description); closed here on
        // every path that makes no channel.
        var keepsDescriptor = false
        defer { if !keepsDescriptor { close(descriptor) } }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        var size = Int(info.st_size)
        if size < slotsEnd {
            // An older version is making the file (it creates it empty, then sets 16,384 bytes):
            // set the same size, never more, or its truncation would cut this mapping short. A
            // process that may not create files does not change one either.
            guard create, ftruncate(descriptor, off_t(slotsEnd)) == 0 else { return nil }
            size = slotsEnd
        } else if size < fileSize, create, ftruncate(descriptor, off_t(fileSize)) == 0 {
            // An older version's complete file: no version truncates a file of this size, so
            // growing it is safe; its processes keep using the slots and ignore the rest.
            size = fileSize
        }
        let length = size >= fileSize ? fileSize : slotsEnd
        // Blocks for every mapped page first: on a full disk a store into a hole raises SIGBUS.
        guard StoreFiles.allocateBlocks(descriptor, length: length) == 0 else { return nil }
        guard let mapped = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0),
            mapped != MAP_FAILED
        else { return nil }
        let header = mapped.assumingMemoryBound(to: UInt64.self)
        // A zero header is a new file: the first process to get here writes it.
        _ = pd_atomic_cas_u64(header, 0, Self.header)
        guard pd_atomic_load_u64(header) == Self.header else {
            // Another layout (another version of the library): leave it alone and work without
            // the channel.
            munmap(mapped, length)
            return nil
        }
        keepsDescriptor = true
        return WakeChannel(base: mapped, length: length, descriptor: descriptor)
    }

    /// Creates the file at its full size, unless it exists: made under a temporary name and
    /// linked into place, so no process ever sees it shorter than `fileSize` (an older version
    /// that found it shorter than 16,384 bytes would set that size, cutting a longer mapping).
    private static func makeFile(at path: String) {
        let temporary = path + ".\(getpid()).new"
        let descriptor = open(temporary, O_RDWR | O_CLOEXEC | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else { return }  // The open below then finds the file or fails.
        defer { unlink(temporary) }
        // open applies the umask; the mode must not depend on it (like data.mdb and lock.mdb).
        let ready = fchmod(descriptor, 0o600) == 0 && ftruncate(descriptor, off_t(fileSize)) == 0
        close(descriptor)
        // EEXIST: another process made it first, which is as good.
        if ready { _ = link(temporary, path) }
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

    /// The byte of the file whose lock the owner of slot `index` holds.
    fileprivate func lockOffset(ofSlot index: Int) -> Int64 { Int64(Self.fileSize + index) }

    /// Releases the lock of slot `index`.
    fileprivate func unlock(slot index: Int) { _ = pd_ofd_lock_byte(descriptor, lockOffset(ofSlot: index), 0) }

    /// A waiter of this process: a free slot, or one whose process is gone; nil when all are
    /// taken by live processes (the watcher then checks at its fallback interval).
    ///
    /// A slot is taken only with its byte's lock: a live owner of this version holds it, in
    /// whatever PID namespace it runs. A slot whose lock is free but whose process ID names a
    /// live process is an older version's (which takes no lock) and is left alone too.
    func claimWaiter() -> Waiter? {
        for index in 0..<Self.capacity {
            let owner = processID(ofSlot: index)
            let current = pd_atomic_load_u32(owner)
            guard current == 0 || pd_process_exists(Int32(bitPattern: current)) == 0 else { continue }
            guard pd_ofd_lock_byte(descriptor, lockOffset(ofSlot: index), 1) != 0 else { continue }
            guard pd_atomic_cas_u32(owner, current, processID) != 0 else {
                unlock(slot: index)
                continue
            }
            ownSlot.store(index, ordering: .relaxed)
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

    // MARK: Announcements

    private func announcementWord(at offset: Int) -> UnsafeMutablePointer<UInt64> {
        base.advanced(by: offset).assumingMemoryBound(to: UInt64.self)
    }

    /// Inside the write transaction that logs `sequence` (under LMDB's writer lock), before its
    /// commit: records that the commit with `sequence` carries `mask`. ``confirm(sequence:)``
    /// completes the announcement after the commit.
    ///
    /// The run of confirmed sequences is broken, and restarts at `sequence`, when the last
    /// confirmed one is not `sequence - 1`: a commit in between was made by a writer that does
    /// not announce (an older version, a process that cannot write this file), or its writer
    /// failed or died between its commit and its confirmation. Bits of a commit that then fails
    /// stay: they only cost a spare delivery.
    func announce(sequence: UInt64, mask: UInt64) {
        guard hasAnnouncements else { return }
        var bits = mask
        while bits != 0 {
            let bit = bits.trailingZeroBitCount
            pd_atomic_store_u64(announcementWord(at: Self.bitLastOffset + bit * 8), sequence)
            bits &= bits - 1
        }
        if pd_atomic_load_u64(announcementWord(at: Self.announcementsOffset + 8)) != sequence &- 1 {
            pd_atomic_store_u64(announcementWord(at: Self.announcementsOffset), sequence)
        }
    }

    /// After the commit of `sequence` succeeded: extends the run of confirmed sequences to it.
    /// Stored after the commit, so a sequence that never committed is never confirmed; a reader
    /// that sees it confirmed sees the bits and the run's start stored before it.
    func confirm(sequence: UInt64) {
        guard hasAnnouncements else { return }
        pd_atomic_store_u64(announcementWord(at: Self.announcementsOffset + 8), sequence)
    }

    /// Whether every commit with a sequence in `(after, through]` was announced and none of
    /// them carried a bit of `mask`: then an observer of `mask` may pass them without reading
    /// the log. False whenever that cannot be shown (no announcements in this file, a writer
    /// that does not announce, a bit announced later than `after`).
    func noneAnnounced(meeting mask: UInt64, after: UInt64, through: UInt64) -> Bool {
        guard hasAnnouncements, through > after else { return hasAnnouncements }
        // The end before the start: the writer stores them in the other order.
        guard pd_atomic_load_u64(announcementWord(at: Self.announcementsOffset + 8)) >= through,
            pd_atomic_load_u64(announcementWord(at: Self.announcementsOffset)) <= after &+ 1
        else { return false }
        var bits = mask
        while bits != 0 {
            let bit = bits.trailingZeroBitCount
            if pd_atomic_load_u64(announcementWord(at: Self.bitLastOffset + bit * 8)) > after { return false }
            bits &= bits - 1
        }
        return true
    }

    /// After a commit: wakes the other processes whose mask meets `commitMask`. Never fails:
    /// the channel is an optimisation, and observers also check at their fallback interval.
    func signal(_ commitMask: UInt64) {
        let count = min(Int(pd_atomic_load_u32(slotCount)), Self.capacity)
        let own = ownSlot.load(ordering: .relaxed)
        for index in 0..<count {
            let owner = pd_atomic_load_u32(processID(ofSlot: index))
            // This process's own observers get its commits from the committing thread.
            guard owner != 0, index != own, pd_atomic_load_u64(mask(ofSlot: index)) & commitMask != 0 else {
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
        /// This process's copy of the bits it stored in `mask`: what it observes, whatever
        /// another process may have written into the shared slot.
        private let ownBits = Atomic<UInt64>(0)

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
                // Only a slot that is still this process's: it holds the slot's lock, but an
                // older version takes none.
                let owner = channel.processID(ofSlot: slot)
                if pd_atomic_load_u32(owner) == channel.processID {
                    pd_atomic_store_u64(mask, 0)
                    _ = pd_atomic_cas_u32(owner, channel.processID, 0)
                }
                // Writers of this process skip the slot no longer: another process may claim it.
                _ = channel.ownSlot.compareExchange(expected: slot, desired: -1, ordering: .relaxed)
                channel.unlock(slot: slot)
            } else {
                UnsafeMutableRawPointer(word).deallocate()
            }
        }

        /// Whether writers of other processes can wake this waiter.
        var isShared: Bool { channel != nil }

        /// Adds `bits` to what wakes this waiter: before the snapshot of a new observer, so a
        /// commit the snapshot misses sees them.
        func add(_ bits: UInt64) {
            ownBits.bitwiseOr(bits, ordering: .sequentiallyConsistent)
            pd_atomic_or_u64(mask, bits)
        }

        /// Sets what wakes this waiter (after observers were removed).
        func set(_ bits: UInt64) {
            ownBits.store(bits, ordering: .sequentiallyConsistent)
            pd_atomic_store_u64(mask, bits)
        }

        /// What this process observes: the bits of every observer registered or registering.
        /// This process's own copy, not the shared slot's, which decides what may be passed
        /// unread (`ObserverRegistry.pass`): bits that another process wrote there, or erased,
        /// must not make this process pass a commit of a key it observes.
        var bits: UInt64 { ownBits.load(ordering: .sequentiallyConsistent) }

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
