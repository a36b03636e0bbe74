import Foundation

/// CPU time of this process, in seconds: on Linux the scheduler's exact run time of every thread
/// (`/proc/self/task/*/schedstat`, nanoseconds); elsewhere, or when that cannot be read, user
/// plus system time from `getrusage`, which a kernel with tick-based accounting charges in whole
/// ticks (4 ms at 250 Hz: 0.04 % of a 10-second window, too coarse for an idle process).
public func cpuSeconds() -> Double {
    if let nanoseconds = scheduledNanoseconds() { return Double(nanoseconds) / 1e9 }
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// The sum of the first field of each thread's `schedstat` (time on a processor, ns); nil when
/// the files cannot be read.
private func scheduledNanoseconds() -> UInt64? {
    guard let threads = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task"), !threads.isEmpty
    else { return nil }
    var total: UInt64 = 0
    for thread in threads {
        // A thread that ended since the listing has no file any more: its time is gone with it.
        guard let text = try? String(contentsOfFile: "/proc/self/task/\(thread)/schedstat", encoding: .utf8) else {
            continue
        }
        guard let first = text.split(separator: " ").first, let nanoseconds = UInt64(first) else { return nil }
        total += nanoseconds
    }
    return total
}

/// CPU time of the calling thread, in seconds (`/proc/thread-self/schedstat`); the process's
/// (`cpuSeconds()`) where that file does not exist.
public func threadCPUSeconds() -> Double {
    guard let text = try? String(contentsOfFile: "/proc/thread-self/schedstat", encoding: .utf8),
        let first = text.split(separator: " ").first, let nanoseconds = UInt64(first)
    else { return cpuSeconds() }
    return Double(nanoseconds) / 1e9
}
