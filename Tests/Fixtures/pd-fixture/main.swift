import Foundation
import PDTestSupport
import PersistentDefaults
import Synchronization

// A child process for the tests and tools: writes to a store the way another process would.
//
//   pd-fixture increment DIR KEY COUNT     COUNT read-modify-write increments, each in write { }
//   pd-fixture set-int DIR KEY VALUE       one durable set of an Int
//   pd-fixture set-bytes DIR KEY BYTES     one set of a Data value of BYTES bytes (grows the map)
//   pd-fixture crash-writer DIR SEED       random multi-key transactions until killed, one
//                                          "ack …" line per commit that returned (see pd-kill-test)
//   pd-fixture power-writer DIR SEED       the same with the commit's CLOCK_MONOTONIC time at the end
//                                          of each line: "ack … NS" (see pd-power-cut-test)
//   pd-fixture hammer DIR THREADS COUNT    THREADS threads × COUNT increments of "counter", each
//                                          transaction also setting "mirror" to the same value
//   pd-fixture set-loop DIR THREADS        THREADS threads each setting its own key "k<thread>" to
//                                          1, 2, 3, … with durable sets (group commit) until
//                                          killed; one "ack <thread> <value>" line per set that returned
//   pd-fixture log-stress DIR THREADS COUNT SEED  THREADS threads × COUNT random writes: durable
//                                          sets of "s.<pid>.<thread>" ("ack s THREAD I"), write { }
//                                          of it and "shared" ("ack w …"), 12 KiB blobs of
//                                          "b.<pid>.<thread>" that grow the map ("ack b …"), aborted
//                                          write { } and over-limit sets (must fail), no-op writes;
//                                          "failure …" lines for anything unexpected, then "done"
//   pd-fixture hold-read DIR               holds a read snapshot, prints "holding", waits to be killed
//   pd-fixture hold-write DIR              holds a write transaction (LMDB's writer lock), prints
//                                          "holding", waits to be killed
//   pd-fixture hold-raw-write DIR          creates an empty LMDB environment in DIR (no store)
//                                          and holds a write transaction on it with LMDB alone,
//                                          prints "holding", waits to be killed
//   pd-fixture copy-and-hold DIR OUT       opens DIR read-only, copies it into the directory OUT
//                                          (compacted), prints "copied", waits to be killed (the
//                                          simulated disk's cut at the end of its input)
//   pd-fixture open-verify DIR             opens DIR without creating it (prints "opened"), runs
//                                          verify() and prints "problems N"; an error goes to
//                                          standard error (exit 3)
//   pd-fixture fault-after-open DIR        opens (creating) DIR, prints "opened", then writes to
//                                          address 8 (must die of SIGSEGV)
//   pd-fixture idle-readers DIR THREADS    THREADS threads each read "k" once, in turn, then wait (idle,
//                                          keeping what a read keeps); prints "idle, N reads failed",
//                                          waits to be killed
//   pd-fixture hold-writes DIR MS          holds write transactions of MS milliseconds each (each
//                                          adds 1 to "held"), MS/4 apart, until killed; prints
//                                          "holding" in the first one
//   pd-fixture grow-on-input DIR BYTES     opens DIR, prints "opened", waits for its input to end,
//                                          then sets "blob" to BYTES bytes (grows the map), prints "grown"
//   pd-fixture fill DIR LIMIT              under RLIMIT_FSIZE = LIMIT bytes, writes 64 KiB values
//                                          until a write fails; prints "wrote N" and "error: …"
//   pd-fixture probe-read-only DIR KEY     opens read-only, prints the Int KEY, then tries a write
//                                          and a writable open; prints what each did
//   pd-fixture open-without-thread-keys DIR  takes every free pthread key, tries to open DIR
//                                          ("open: …"), frees the keys, opens it again and sets
//                                          "k" to 1 ("again: …")
//
//   pd-fixture create-and-vanish DIR       creates a `.bounded` store and ends with _exit (no
//                                          exit handlers, no close)
//   pd-fixture open-standard               PersistentDefaults.openStandard(); prints "opened PATH"
//   pd-fixture standard-threads PATH N     makes PATH the standard store's path (with an error handler
//                                          that counts its calls); N threads released at once each
//                                          take `standard` and add 1 to "counter" in write { }; prints
//                                          "stores S handled H counter C temporary T" (S distinct stores)
//
//   pd-fixture bounded-exit DIR COUNT      makes DIR the standard store, `.bounded` with a one-hour
//                                          interval, sets "k" to 1…COUNT and returns from main
//                                          without releasing it: only the exit can sync
//
//   pd-fixture temporary-standard          makes a temporary store the standard store (the documented
//                                          recipe), sets "k" through `standard`, prints the path and
//                                          returns from main without releasing it: only the exit
//                                          handler can remove the directory
//
//   pd-fixture standard-handler-reads-standard FILE  makes FILE a plain file, configures it as the
//                                          standard store's path with an error handler that reads
//                                          `standard`, prints "handled at level …" and "stand-in PATH"
//
//   pd-fixture map-under-limit DIR         reads the Int "answer", lowers RLIMIT_AS to the address
//                                          space in use + 32 MiB, prints "limited", then reads
//                                          "answer" every millisecond until a read fails (another
//                                          process grew the store and its map size cannot be
//                                          mapped here); prints "error: …", "after: ANSWER BLOBSIZE"
//                                          and "write: …" for reads and a write after the failure
//
//   pd-fixture release-in-flush-handler DIR  opens DIR `.bounded` (10 ms) with an error handler that
//                                          releases the store's only handle, sets "k" to 1 and waits for
//                                          a background flush to fail (run it under strace's fault
//                                          injection); prints "released" once the handler's release
//                                          returned, then opens DIR again and prints "reopened K"
//
//   pd-fixture open-in-close-flush-handler DIR OTHER  opens DIR `.bounded` (one hour) with an error
//                                          handler that opens the store OTHER, sets "k" to 1 and
//                                          releases DIR, whose closing flush fails under strace's fault
//                                          injection; prints "closed", then "handled" once the handler
//                                          opened OTHER
//
//   pd-fixture observe-idle DIR KEY SECONDS  observe KEY while idle; print the CPU time used
//   pd-fixture watch DIR COUNT KEY...      observe the Int KEYs; print "channel writable: yes|no",
//                                          "ready", then "change KEY OLD NEW SEQUENCE" per change,
//                                          and "done" after COUNT changes
//
// Environment: PD_LOG_RETENTION sets the log retention (PD_LOG_RETENTION_BYTES its byte limit),
// PD_DURABILITY=bounded the bounded durability (interval PD_BOUNDED_MS, default 100 ms),
// PD_MAX_READERS the reader slots, PD_READ_ONLY=1 opens read-only, PD_FALLBACK_MS the fallback
// check interval of observers.
//
// Exit codes (ToolExitCode): 0 done, 2 usage, 3 a store error (printed on stderr).

func options() -> PersistentDefaults.Options {
    var options = PersistentDefaults.Options()
    let environment = ProcessInfo.processInfo.environment
    if let retention = environment["PD_LOG_RETENTION"].flatMap(Int.init) { options.logRetention = retention }
    if let bytes = environment["PD_LOG_RETENTION_BYTES"].flatMap(Int.init) { options.logRetentionBytes = bytes }
    if environment["PD_DURABILITY"] == "bounded" {
        let milliseconds = environment["PD_BOUNDED_MS"].flatMap(Int.init) ?? 100
        options.durability = .bounded(interval: .milliseconds(milliseconds))
    }
    if let readers = environment["PD_MAX_READERS"].flatMap(Int.init) { options.maxReaders = readers }
    if environment["PD_READ_ONLY"] == "1" { options.readOnly = true }
    if let milliseconds = environment["PD_FALLBACK_MS"].flatMap(Int.init) {
        options.fallbackCheckInterval = .milliseconds(milliseconds)
    }
    return options
}

func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

func run(_ arguments: [String]) -> ToolExitCode {
    do {
        switch (arguments.first, arguments.count) {
        case ("crash-writer", 3):
            guard let seed = UInt64(arguments[2]) else { return .usage }
            // One write(2) per line, unbuffered: a line on the pipe is a commit that returned.
            try CrashWriter.run(path: arguments[1], seed: seed, options: options()) { number, entries in
                say(CrashWriter.acknowledgement(number: number, entries: entries))
            }
        case ("power-writer", 3):
            guard let seed = UInt64(arguments[2]) else { return .usage }
            // The time is taken after the commit returned, then the line goes out in one write(2).
            try CrashWriter.run(path: arguments[1], seed: seed, options: options()) { number, entries in
                say(PowerCut.acknowledgement(number: number, entries: entries, time: PowerCut.monotonicNanoseconds()))
            }
        case ("hammer", 4):
            guard let threads = Int(arguments[2]), let count = Int(arguments[3]) else { return .usage }
            try hammer(path: arguments[1], threads: threads, count: count)
        case ("log-stress", 5):
            guard let threads = Int(arguments[2]), let count = Int(arguments[3]), let seed = UInt64(arguments[4]) else {
                return .usage
            }
            try logStress(path: arguments[1], threads: threads, count: count, seed: seed)
        case ("set-loop", 3):
            guard let threads = Int(arguments[2]) else { return .usage }
            try setLoop(path: arguments[1], threads: threads)
        case ("create-and-vanish", 2):
            // Creates a `.bounded` store (one-hour interval) and ends without any exit handler:
            // only what the open itself synced is on disk for sure.
            var bounded = options()
            bounded.durability = .bounded(interval: .seconds(3600))
            let store = try PersistentDefaults(path: arguments[1], options: bounded)
            withExtendedLifetime(store) { _exit(0) }  // Never closed: no flush on the way out.
        case ("open-standard", 1):
            // PERSISTENT_DEFAULTS_PATH chooses the directory; the throwing form must throw.
            let store = try PersistentDefaults.openStandard()
            say("opened \(store.path)")
        case ("standard-threads", 3):
            guard let threads = Int(arguments[2]) else { return .usage }
            try standardThreads(path: arguments[1], threads: threads)
        case ("hold-read", 2):
            let store = try PersistentDefaults(path: arguments[1], options: options())
            try store.read { _ in
                say("holding")
                while true { pause() }
            }
        case ("hold-write", 2):
            let store = try PersistentDefaults(path: arguments[1], options: options())
            try store.write { _ in
                say("holding")
                while true { pause() }
            }
        case ("hold-raw-write", 2):
            try rawLMDBHoldingWrite(arguments[1]) {
                say("holding")
                while true { pause() }
            }
        case ("copy-and-hold", 3):
            // Read-only: the simulated disk then watches only the copy's data.mdb.
            var readOnly = PersistentDefaults.Options()
            readOnly.readOnly = true
            let store = try PersistentDefaults(path: arguments[1], options: readOnly)
            try store.copy(to: arguments[2], compact: true)
            say("copied")
            while true { pause() }
        case ("open-verify", 2):
            var existing = PersistentDefaults.Options()
            existing.createIfMissing = false
            let store = try PersistentDefaults(path: arguments[1], options: existing)
            say("opened")
            say("problems \(try store.verify().count)")
        case ("fault-after-open", 2):
            _ = try PersistentDefaults(path: arguments[1])
            say("opened")
            // Address 8, computed from the arguments so that the compiler cannot see it.
            let unmapped = UnsafeMutablePointer<UInt8>(bitPattern: 4 * arguments.count)
            unmapped?.pointee = 1
            say("wrote to address \(4 * arguments.count)")
        case ("idle-readers", 3):
            guard let threads = Int(arguments[2]) else { return .usage }
            let store = try PersistentDefaults(path: arguments[1], options: options())
            let read = DispatchSemaphore(value: 0)
            let failures = Atomic<Int>(0)
            for _ in 0..<threads {
                // One after another: no read waits for a slot that another thread of this
                // process holds for a moment (and then empties kept ones to get it).
                Thread.detachNewThread {
                    do {
                        _ = try store.value(for: PersistentDefaults.Key<Int>("k", default: 0))
                    } catch {
                        failures.add(1, ordering: .relaxed)
                    }
                    read.signal()
                    while true { pause() }
                }
                read.wait()
            }
            say("idle, \(failures.load(ordering: .relaxed)) reads failed")
            while true { pause() }
        case ("hold-writes", 3):
            guard let milliseconds = UInt32(arguments[2]) else { return .usage }
            try holdWrites(path: arguments[1], milliseconds: milliseconds)
        case ("fill", 3):
            guard let limit = Int(arguments[2]) else { return .usage }
            return fill(path: arguments[1], limit: limit)
        case ("bounded-exit", 3):
            guard let count = Int(arguments[2]) else { return .usage }
            var bounded = options()
            bounded.durability = .bounded(interval: .seconds(3600))
            try PersistentDefaults.configureStandard(path: arguments[1], options: bounded)
            let key = PersistentDefaults.Key<Int>("k", default: 0)
            for value in 1...max(count, 1) { try PersistentDefaults.standard.set(value, for: key) }
        case ("standard-handler-reads-standard", 2):
            // The standard store cannot open (its path is a file); the error handler reads a
            // setting through `standard`, as a logger that reads its level from settings would.
            let file = arguments[1]
            guard FileManager.default.createFile(atPath: file, contents: Data("not a store".utf8)) else {
                return .usage
            }
            var handled = PersistentDefaults.Options()
            handled.errorHandler = { error in
                let level = PersistentDefaults.standard[PersistentDefaults.Key<Int>("logLevel", default: 1)]
                say("handled at level \(level): \(error)")
            }
            try PersistentDefaults.configureStandard(path: file, options: handled)
            say("stand-in \(PersistentDefaults.standard.path)")
        case ("temporary-standard", 1):
            let temporary = try PersistentDefaults.temporary()
            try PersistentDefaults.configureStandard(path: temporary.path, options: temporary.options)
            let standard = try PersistentDefaults.openStandard()
            try standard.set(1, for: PersistentDefaults.Key<Int>("k", default: 0))
            guard standard.isTemporary, standard.path == temporary.path else { return .storeError }
            say(standard.path)
        case ("map-under-limit", 2):
            return mapUnderLimit(path: arguments[1])
        case ("watch", 4...):
            guard let count = Int(arguments[2]) else { return .usage }
            try watch(path: arguments[1], count: count, keys: Array(arguments[3...]))
        case ("grow-on-input", 3):
            guard let size = Int(arguments[2]) else { return .usage }
            let store = try PersistentDefaults(path: arguments[1], options: options())
            say("opened")
            _ = FileHandle.standardInput.readDataToEndOfFile()
            try store.set(Data(repeating: 1, count: size), for: PersistentDefaults.Key<Data>("blob", default: Data()))
            say("grown")
        case ("probe-read-only", 3):
            probeReadOnly(path: arguments[1], key: arguments[2])
        case ("open-without-thread-keys", 2):
            openWithoutThreadKeys(path: arguments[1])
        case ("release-in-flush-handler", 2):
            return try releaseInFlushHandler(path: arguments[1])
        case ("open-in-close-flush-handler", 3):
            return try openInCloseFlushHandler(path: arguments[1], other: arguments[2])
        case (_, 4):
            return try simple(arguments)
        default:
            FileHandle.standardError.write(
                Data("usage: pd-fixture COMMAND DIR … (see the comment in main.swift)\n".utf8))
            return .usage
        }
    } catch {
        FileHandle.standardError.write(Data("pd-fixture: \(error)\n".utf8))
        return .storeError
    }
    return .success
}

func simple(_ arguments: [String]) throws -> ToolExitCode {
    let store = try PersistentDefaults(path: arguments[1], options: options())
    switch (arguments[0], Int(arguments[3])) {
    case ("increment", let count?):
        let key = PersistentDefaults.Key<Int>(arguments[2], default: 0)
        for _ in 0..<count { try store.write { $0[key] += 1 } }
    case ("set-int", let value?):
        try store.set(value, for: PersistentDefaults.Key<Int>(arguments[2], default: 0))
    case ("set-bytes", let size?):
        try store.set(
            Data(repeating: 0xAB, count: size), for: PersistentDefaults.Key<Data>(arguments[2], default: Data()))
    case ("observe-idle", let seconds?):
        let token = store.observe(PersistentDefaults.Key<Int>(arguments[2], default: 0)) { _ in }
        let before = cpuSeconds()
        // Measuring idle cost: waiting out the interval is the point, not synchronisation.
        Thread.sleep(forTimeInterval: Double(seconds))
        let used = cpuSeconds() - before
        print("cpu \(used) s over \(seconds) s = \(used / Double(seconds) * 100) %")
        token.cancel()
    default:
        FileHandle.standardError.write(Data("pd-fixture: unknown command \(arguments[0])\n".utf8))
        return .usage
    }
    return .success
}

func watch(path: String, count: Int, keys: [String]) throws {
    let store = try PersistentDefaults(path: path, options: options())
    say("channel writable: \(access(path + "/notify", W_OK) == 0 ? "yes" : "no")")
    let seen = DispatchSemaphore(value: 0)
    let tokens = keys.map { name in
        store.observe(PersistentDefaults.Key<Int>(name, default: 0)) { change in
            say("change \(name) \(change.oldValue) \(change.newValue) \(change.sequence)")
            seen.signal()
        }
    }
    say("ready")
    for _ in 0..<count { seen.wait() }
    say("done")
    withExtendedLifetime(tokens) {}
}

func hammer(path: String, threads: Int, count: Int) throws {
    let store = try PersistentDefaults(path: path, options: options())
    let counter = PersistentDefaults.Key<Int>("counter", default: 0)
    let mirror = PersistentDefaults.Key<Int>("mirror", default: 0)
    let failures = DispatchQueue(label: "failures")
    nonisolated(unsafe) var failure: (any Error)?
    DispatchQueue.concurrentPerform(iterations: threads) { _ in
        do {
            for _ in 0..<count {
                try store.write { transaction in
                    let next = transaction[counter] + 1
                    transaction[counter] = next
                    transaction[mirror] = next
                }
            }
        } catch {
            failures.sync { failure = error }
        }
    }
    if let failure { throw failure }
}

func setLoop(path: String, threads: Int) throws {
    let store = try PersistentDefaults(path: path, options: options())
    // Threads of their own: concurrentPerform would run only as many loops as there are cores.
    for thread in 0..<threads {
        Thread.detachNewThread {
            let key = PersistentDefaults.Key<Int>("k\(thread)", default: 0)
            var value = 1
            // Runs until the process is killed; a failed set ends this thread's loop.
            while (try? store.set(value, for: key)) != nil {
                say("ack \(thread) \(value)")
                value += 1
            }
        }
    }
    while true { pause() }
}

func standardThreads(path: String, threads: Int) throws {
    let handled = Guarded(0)
    var counted = options()
    counted.errorHandler = { _ in handled.withLock { $0 += 1 } }
    try PersistentDefaults.configureStandard(path: path, options: counted)
    let counter = PersistentDefaults.Key<Int>("counter", default: 0)
    let stores = Guarded<[ObjectIdentifier]>([])
    let start = DispatchSemaphore(value: 0)
    let done = DispatchGroup()
    for _ in 0..<threads {
        done.enter()
        Thread.detachNewThread {
            defer { done.leave() }
            start.wait()
            let store = PersistentDefaults.standard
            stores.withLock { $0.append(ObjectIdentifier(store)) }
            do { try store.write { $0[counter] += 1 } } catch { say("failure \(error)") }
        }
    }
    for _ in 0..<threads { start.signal() }
    done.wait()
    let standard = PersistentDefaults.standard
    let distinct = Set(stores.withLock { $0 }).count
    say(
        "stores \(distinct) handled \(handled.withLock { $0 }) counter \(standard[counter]) "
            + "temporary \(standard.isTemporary)")
}

func holdWrites(path: String, milliseconds: UInt32) throws {
    let store = try PersistentDefaults(path: path, options: options())
    let held = PersistentDefaults.Key<Int>("held", default: 0)
    var first = true
    while true {
        try store.write { tx in
            tx[held] += 1
            if first { say("holding") }
            usleep(milliseconds * 1000)  // Another process's long transaction, not synchronisation.
        }
        first = false
        usleep(milliseconds * 250)  // Lets the writers waiting for LMDB's lock in.
    }
}

func fill(path: String, limit: Int) -> ToolExitCode {
    // Past the limit, write(2) fails with EFBIG instead of the process getting SIGXFSZ.
    signal(SIGXFSZ, SIG_IGN)
    var written = 0
    do {
        let store = try PersistentDefaults(path: path, options: options())
        var bound = rlimit(rlim_cur: rlim_t(limit), rlim_max: rlim_t(limit))
        guard setrlimit(Int32(RLIMIT_FSIZE.rawValue), &bound) == 0 else { return .storeError }
        while true {
            try store.set(
                Data(repeating: UInt8(truncatingIfNeeded: written), count: 64 << 10),
                for: PersistentDefaults.Key<Data>("blob.\(written)", default: Data()))
            written += 1
        }
    } catch {
        say("wrote \(written)")
        say("error: \(error)")
        let code = (error as? PersistentDefaultsError)?.code?.rawValue
        return code == EFBIG || code == ENOSPC ? .success : .storeError
    }
}

/// The address space this process uses, in bytes (`/proc/self/statm`, first field, in pages).
func addressSpaceBytes() -> Int? {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
        let pages = text.split(separator: " ").first.flatMap({ Int($0) })
    else { return nil }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}

func mapUnderLimit(path: String) -> ToolExitCode {
    let answer = PersistentDefaults.Key<Int>("answer", default: -1)
    let blob = PersistentDefaults.Key<Data>("blob", default: Data())
    do {
        let store = try PersistentDefaults(path: path, options: options())
        say("before: \(try store.value(for: answer))")
        guard let used = addressSpaceBytes() else { return .storeError }
        var bound = rlimit(rlim_cur: rlim_t(used + 32 << 20), rlim_max: rlim_t(used + 32 << 20))
        guard setrlimit(Int32(RLIMIT_AS.rawValue), &bound) == 0 else { return .storeError }
        say("limited")
        // Polling is the point here: the event is another process's commit, seen by a read.
        let deadline = Date().addingTimeInterval(60)
        var failure: (any Error)?
        while failure == nil, Date() < deadline {
            do {
                _ = try store.value(for: answer)
                usleep(1_000)
            } catch {
                failure = error
            }
        }
        guard let failure else {
            say("no failure")
            return .storeError
        }
        say("error: \(failure)")
        say("after: \(try store.value(for: answer)) \(try store.value(for: blob).count)")
        do {
            try store.set(8, for: answer)
            say("write: ok")
        } catch {
            say("write: \(error)")
        }
    } catch {
        say("failed: \(error)")
        return .storeError
    }
    return .success
}

func openWithoutThreadKeys(path: String) {
    var taken: [pthread_key_t] = []
    var key: pthread_key_t = 0
    while pthread_key_create(&key, nil) == 0 { taken.append(key) }
    do {
        _ = try PersistentDefaults(path: path, options: options())
        say("open: succeeded")
    } catch {
        say("open: \(error)")
    }
    for key in taken { pthread_key_delete(key) }
    do {
        let store = try PersistentDefaults(path: path, options: options())
        try store.set(1, for: PersistentDefaults.Key<Int>("k", default: 0))
        say("again: \(try store.value(for: PersistentDefaults.Key<Int>("k", default: 0)))")
    } catch {
        say("again: \(error)")
    }
}

func probeReadOnly(path: String, key: String) {
    var readOnly = options()
    readOnly.readOnly = true
    do {
        let store = try PersistentDefaults(path: path, options: readOnly)
        say("read: \(try store.value(for: PersistentDefaults.Key<Int>(key, default: -1)))")
        do {
            try store.set(1, for: PersistentDefaults.Key<Int>(key, default: -1))
            say("write: succeeded")
        } catch {
            say("write: \(error)")
        }
    } catch {
        say("read-only open: \(error)")
    }
    do {
        _ = try PersistentDefaults(path: path, options: options())
        say("writable open: succeeded")
    } catch {
        say("writable open: \(error)")
    }
}

func releaseInFlushHandler(path: String) throws -> ToolExitCode {
    let held = Guarded<PersistentDefaults?>(nil)
    let released = DispatchSemaphore(value: 0)
    var bounded = options()
    bounded.durability = .bounded(interval: .milliseconds(10))
    var handled = bounded
    handled.errorHandler = { error in
        say("handled: \(error)")
        // Taken out under the lock, released outside it: the last handle goes in this handler.
        guard
            let store = held.withLock({ store -> PersistentDefaults? in
                defer { store = nil }
                return store
            })
        else { return }
        _ = consume store
        say("released")
        released.signal()
    }
    let key = PersistentDefaults.Key<Int>("k", default: 0)
    do {
        let store = try PersistentDefaults(path: path, options: handled)
        try store.set(1, for: key)
        held.withLock { $0 = store }
    }
    guard released.wait(timeout: .now() + 20) == .success else { return .storeError }
    let again = try PersistentDefaults(path: path, options: bounded)
    say("reopened \(again[key])")
    return .success
}

func openInCloseFlushHandler(path: String, other: String) throws -> ToolExitCode {
    let handled = DispatchSemaphore(value: 0)
    var options = options()
    options.durability = .bounded(interval: .seconds(3600))
    options.errorHandler = { error in
        // A handler that records the failure in another store, as an app's logger might.
        do {
            let log = try PersistentDefaults(path: other)
            log[PersistentDefaults.Key<String>("lastError", default: "")] = "\(error)"
        } catch {
            say("other: \(error)")
        }
        handled.signal()
    }
    do {
        let store = try PersistentDefaults(path: path, options: options)
        try store.set(1, for: PersistentDefaults.Key<Int>("k", default: 0))
    }  // The last handle goes: the store closes and its closing flush fails.
    say("closed")
    guard handled.wait(timeout: .now() + 20) == .success else { return .storeError }
    say("handled")
    return .success
}

run(Array(CommandLine.arguments.dropFirst())).exit()

struct StressAbort: Error {}

func logStress(path: String, threads: Int, count: Int, seed: UInt64) throws {
    var stressOptions = options()
    stressOptions.maxValueSize = 16 << 10
    stressOptions.initialMapSize = 64 << 10
    let store = try PersistentDefaults(path: path, options: stressOptions)
    let pid = getpid()
    let shared = PersistentDefaults.Key<Int>("shared", default: 0)
    let lines = DispatchQueue(label: "lines")
    let failures = Guarded<[String]>([])
    let done = DispatchGroup()
    for thread in 0..<threads {
        done.enter()
        Thread.detachNewThread {
            defer { done.leave() }
            var state = seed &+ UInt64(thread) &* 0x9E37_79B9_7F4A_7C15 &+ UInt64(pid)
            func next() -> UInt64 {
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return state >> 33
            }
            let key = PersistentDefaults.Key<Int>("s.\(pid).\(thread)", default: 0)
            let blob = PersistentDefaults.Key<Data>("b.\(pid).\(thread)", default: Data())
            for index in 1...count {
                let roll = next() % 100
                do {
                    switch roll {
                    case 0..<40:
                        try store.set(index, for: key)
                        lines.sync { say("ack s \(thread) \(index)") }
                    case 40..<55:
                        try store.write { tx in
                            tx[key] = index
                            tx[shared] += 1
                        }
                        lines.sync { say("ack w \(thread) \(index)") }
                    case 55..<65:
                        do {
                            try store.write { tx in
                                tx[key] = -index
                                throw StressAbort()
                            }
                            failures.withLock { $0.append("abort \(thread) \(index) committed") }
                        } catch is StressAbort {}
                    case 65..<75:
                        do {
                            try store.set(Data(repeating: 1, count: 32 << 10), for: blob)
                            failures.withLock { $0.append("too large \(thread) \(index) committed") }
                        } catch PersistentDefaultsError.valueTooLarge {}
                    case 75..<85:
                        var bytes = Data(repeating: UInt8(truncatingIfNeeded: index), count: 12 << 10)
                        withUnsafeBytes(of: Int64(index).bigEndian) { bytes.replaceSubrange(0..<8, with: $0) }
                        try store.set(bytes, for: blob)
                        lines.sync { say("ack b \(thread) \(index)") }
                    default:
                        try store.write { tx in tx[key] = tx[key] }
                    }
                } catch {
                    failures.withLock { $0.append("\(thread) \(index): \(error)") }
                }
            }
        }
    }
    done.wait()
    for failure in failures.withLock({ $0 }) { say("failure \(failure)") }
    say("done")
}
