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

/// CPU time of another process, in seconds: the scheduler's run time of every thread it has
/// (`/proc/PID/task/*/schedstat`); nil when those files cannot be read (not Linux, or the process
/// ended). Read from outside, the measurement costs the measured process nothing.
public func cpuSeconds(ofProcess processID: Int32) -> Double? {
    scheduledNanoseconds(process: "/proc/\(processID)").map { Double($0) / 1e9 }
}

/// The sum of every thread's time on a processor (ns); nil when the files cannot be read.
private func scheduledNanoseconds(process directory: String = "/proc/self") -> UInt64? {
    // The process's own file tells whether this kernel has them in the expected form.
    guard schedstatNanoseconds(directory + "/schedstat") != nil,
        let threads = try? FileManager.default.contentsOfDirectory(atPath: directory + "/task"), !threads.isEmpty
    else { return nil }
    // A thread that ended since the listing has no file any more: its time is gone with it.
    return threads.reduce(0) { $0 + (schedstatNanoseconds(directory + "/task/\($1)/schedstat") ?? 0) }
}

/// The first field of a `schedstat` file: time spent on a processor, in nanoseconds.
private func schedstatNanoseconds(_ path: String) -> UInt64? {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8),
        let first = text.split(separator: " ").first
    else { return nil }
    return UInt64(first)
}
