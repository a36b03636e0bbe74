import CPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The store's wake-up channel: a word in the file `notify` of the store directory, mapped
/// `MAP_SHARED` by every process that uses the store, that a writer advances after each commit
/// and on which observing processes sleep (a Linux futex).
///
/// The word (offset 8, 32 bits, host byte order) holds a generation in its upper 31 bits and,
/// in bit 0, "a process sleeps on it". A waiter reads the word, checks the store, sets bit 0
/// with a compare-and-swap (failing, and checking again, if a commit moved the word meanwhile)
/// and sleeps while the word still holds that value (`FUTEX_WAIT` compares atomically). A
/// writer advances the generation and clears bit 0 in one compare-and-swap, and calls
/// `FUTEX_WAKE` only when bit 0 was set. Because the bit and the generation change together,
/// no wake-up can fall between a waiter's announcement and its sleep; because the writer
/// clears the bit, a waiter killed while sleeping costs the next commit one `FUTEX_WAKE` that
/// wakes nobody, and no later commit anything. With nobody waiting, a commit pays one atomic
/// compare-and-swap on a shared page and no system call.
///
/// The same type also serves as a word private to the process (``makePrivate()``), for
/// watchers that cannot use the store's file: then only `stop()` wakes them early.
///
/// `@unchecked Sendable`: the mapping is set up in `init` and unmapped in `deinit`; the word is
/// only accessed through atomic operations.
final class WakeChannel: @unchecked Sendable {
    /// The file's name in the store directory.
    static let fileName = "notify"
    /// The file's size: one page.
    static let fileSize = 4096
    /// The first 8 bytes of the file, read as one host-order `UInt64`: the magic `PDWK` in the
    /// low 32 bits and the layout version (1) in the high 32 bits.
    static let header = UInt64(0x4B57_4450) | UInt64(1) << 32

    private let base: UnsafeMutableRawPointer
    /// Whether `base` is the shared file mapping (else private memory).
    let isShared: Bool
    private var word: UnsafeMutablePointer<UInt32> {
        base.advanced(by: 8).assumingMemoryBound(to: UInt32.self)
    }

    private init(base: UnsafeMutableRawPointer, isShared: Bool) {
        self.base = base
        self.isShared = isShared
    }

    deinit {
        if isShared {
            munmap(base, Self.fileSize)
        } else {
            base.deallocate()
        }
    }

    /// A word that only this process uses: `wait` sleeps until the timeout or `signal()`.
    static func makePrivate() -> WakeChannel {
        let memory = UnsafeMutableRawPointer.allocate(byteCount: 16, alignment: 8)
        memory.initializeMemory(as: UInt8.self, repeating: 0, count: 16)
        return WakeChannel(base: memory, isShared: false)
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
            // Another layout (a newer library): leave it alone and work without the channel.
            munmap(mapped, fileSize)
            return nil
        }
        return WakeChannel(base: mapped, isShared: true)
    }

    /// The word's current value, to pass to ``wait(from:timeoutNanoseconds:)`` after checking
    /// the store.
    func current() -> UInt32 { pd_atomic_load_u32(word) }

    /// Announces a waiter and sleeps while the word holds `seen`, at most `timeoutNanoseconds`;
    /// returns at once when the word moved since `seen` was read.
    func wait(from seen: UInt32, timeoutNanoseconds: Int64) {
        var expected = seen
        if seen & 1 == 0 {
            // Fails when a commit (or another waiter's announcement) moved the word: return and
            // let the caller check again.
            guard pd_atomic_cas_u32(word, seen, seen | 1) != 0 else { return }
            expected = seen | 1
        }
        // EAGAIN (the word moved), ETIMEDOUT and EINTR all mean: check the store again.
        _ = pd_futex_wait(word, expected, timeoutNanoseconds)
    }

    /// Advances the generation and, when a process announced that it waits, wakes every waiter.
    /// Never fails: the channel is an optimisation, and observers also check at their fallback
    /// interval.
    func signal() {
        var current = pd_atomic_load_u32(word)
        // (x | 1) + 1 is the next even value: the generation advances and bit 0 is cleared.
        while pd_atomic_cas_u32(word, current, (current | 1) &+ 1) == 0 {
            current = pd_atomic_load_u32(word)
        }
        // A wake-up that fails (it cannot, for a mapped word) would only delay observers until
        // their fallback check; the result is ignored on purpose.
        if current & 1 != 0 { _ = pd_futex_wake_all(word) }
    }
}
