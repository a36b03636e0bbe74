import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension PersistentDefaults {
    /// A new, empty store in a fresh private directory under the temporary directory, for tests
    /// and scratch work: the directory is removed when the store's last handle in this process
    /// closes.
    ///
    /// ```swift
    /// @Test func countsLaunches() throws {
    ///     let store = try PersistentDefaults.temporary()
    ///     store[.launchCount] += 1
    ///     #expect(store[.launchCount] == 1)
    /// }                                            // the directory is gone here
    /// ```
    ///
    /// The directory is made by `mkdtemp` (mode 0700) in `$TMPDIR` (else `/tmp`), named
    /// `PersistentDefaults-temporary-XXXXXX`; ``path`` tells where. Other handles opened on that
    /// path share the store and keep it alive. A handle that is never released (a global,
    /// ``standard``) keeps it until the process exits normally, when an `atexit` handler removes
    /// it; after a crash or a kill, the system's temporary-file cleanup (`systemd-tmpfiles`,
    /// a `/tmp` on `tmpfs`, a reboot) removes it.
    ///
    /// Throws ``PersistentDefaultsError/optionsConflict(path:reason:)`` for
    /// ``Options/readOnly`` (a new store starts empty, so it must be writable), and
    /// ``PersistentDefaultsError/fileSystem(path:errno:operation:)`` when no directory can be
    /// made; nothing is left behind. ``Options/createIfMissing`` is ignored: the store is new.
    public static func temporary(options: Options = Options()) throws -> PersistentDefaults {
        guard !options.readOnly else {
            throw PersistentDefaultsError.optionsConflict(
                path: FileManager.default.temporaryDirectory.path,
                reason: "a temporary store starts empty, so it cannot be opened read-only")
        }
        return try temporary(in: FileManager.default.temporaryDirectory.path, options: options)
    }

    /// A new writable store in a new directory (`prefix` and six random characters) in `base`,
    /// removed when it closes or at a normal exit; nothing is left behind when the open fails.
    static func temporary(
        in base: String, prefix: String = "PersistentDefaults-temporary-", options: Options
    ) throws -> PersistentDefaults {
        let path = try TemporaryStores.makeDirectory(in: base, prefix: prefix)
        var options = options
        options.readOnly = false
        options.createIfMissing = true
        do {
            return try PersistentDefaults(path: path, options: options, temporary: true)
        } catch {
            TemporaryStores.remove(path)
            throw error
        }
    }

    /// Whether the store is a temporary one (``temporary(options:)``), removed when it closes.
    public var isTemporary: Bool { core.isTemporary }
}

/// The directories of the temporary stores still open, removed when each closes or, for those
/// never closed, at a normal exit.
enum TemporaryStores {
    private static let live = Locked<Set<String>>([])
    /// Registers the exit handler once per process, on first use.
    private static let exitHandler: Void = {
        // Ignored on purpose: atexit fails only when its table is full; closing still removes.
        _ = atexit { TemporaryStores.removeAllAtExit() }
    }()

    /// Makes a fresh private directory (mode 0700) named `prefix` and six random characters in
    /// `base` and returns its canonical path; it is removed when its store closes or at exit.
    static func makeDirectory(in base: String, prefix: String) throws(PersistentDefaultsError) -> String {
        var template = Array((base + "/" + prefix + "XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buffer in mkdtemp(buffer.baseAddress!) }
        guard let made else { throw .fileSystem(path: base, errno: errno, operation: "mkdtemp") }
        let created = String(cString: made)
        // `remove` keys directories by their canonical path, which the store's `path` is.
        let path: String
        do throws(PersistentDefaultsError) {
            path = try StoreFiles.canonicalPath(created, creating: false)
        } catch {
            rmdir(created)
            throw error
        }
        _ = exitHandler
        live.withLock { _ = $0.insert(path) }
        return path
    }

    /// Removes a temporary store's directory and everything in it.
    static func remove(_ path: String) {
        guard live.withLock({ $0.remove(path) }) != nil else { return }
        try? FileManager.default.removeItem(atPath: path)
    }

    /// Removes the directories of the temporary stores still open at a normal exit. The files
    /// may still be mapped or written by other threads: on Linux an unlinked file stays valid
    /// for them until the process ends.
    private static func removeAllAtExit() {
        for path in live.withLock({ $0 }) { remove(path) }
    }
}
