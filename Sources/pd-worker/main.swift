import Foundation
import PersistentDefaults

// A child process for the tests and tools: writes to a store the way another process would.
//
//   pd-worker increment DIR KEY COUNT      COUNT read-modify-write increments, each in write { }
//   pd-worker set-int DIR KEY VALUE        one durable set of an Int
//   pd-worker set-bytes DIR KEY BYTES      one set of a Data value of BYTES bytes (grows the map)
//
//   pd-worker observe-idle DIR KEY SECONDS  observe KEY while idle; print the CPU time used
//
// PD_LOG_RETENTION in the environment sets the store's log retention.
//
// Exit codes: 0 done, 2 usage, 3 a store error (printed on stderr).

enum ExitCode: Int32 {
    case ok = 0
    case usage = 2
    case failure = 3
}

func run(_ arguments: [String]) -> ExitCode {
    guard arguments.count == 4 else {
        FileHandle.standardError.write(
            Data("usage: pd-worker increment|set-int|set-bytes|observe-idle DIR KEY N\n".utf8))
        return .usage
    }
    do {
        var options = PersistentDefaults.Options()
        if let retention = ProcessInfo.processInfo.environment["PD_LOG_RETENTION"].flatMap(Int.init) {
            options.logRetention = retention
        }
        let store = try PersistentDefaults(path: arguments[1], options: options)
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
            FileHandle.standardError.write(Data("pd-worker: unknown command \(arguments[0])\n".utf8))
            return .usage
        }
    } catch {
        FileHandle.standardError.write(Data("pd-worker: \(error)\n".utf8))
        return .failure
    }
    return .ok
}

/// User plus system CPU time of this process, in seconds.
func cpuSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

exit(run(Array(CommandLine.arguments.dropFirst())).rawValue)
