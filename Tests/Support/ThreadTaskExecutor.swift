import Foundation

/// Runs the jobs of the tasks that prefer it (`Task(executorPreference:)`) on one thread of its
/// own, so that a test's task never waits for the cooperative pool: the pool has one thread per
/// core (two here), and other tests that block their threads in synchronous waits can hold both
/// for minutes under ThreadSanitizer, so a `Task { }` that a test waits for could miss its
/// timeout without anything being wrong.
///
/// ```swift
/// Task(executorPreference: ThreadTaskExecutor.shared) { for await value in store.updates(for: key) { … } }
/// ```
///
/// Its jobs must not block the thread for long: they share it.
public final class ThreadTaskExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked Sendable: `jobs` is only touched under `condition`.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []

    /// One executor (and thread) for every test of the process.
    public static let shared = ThreadTaskExecutor()

    private init() {
        let thread = Thread { [unowned self] in run() }
        thread.name = "ThreadTaskExecutor"
        thread.start()
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
