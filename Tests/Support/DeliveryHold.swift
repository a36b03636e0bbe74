import Foundation
import PersistentDefaults

/// Commits `value` for `key` on another thread and holds this process's delivery of that commit
/// (a key observer of `key` that blocks while the record numbered `sequence` is delivered, the
/// key observers of a record being called before its prefix and commit observers) for as long as
/// `whileHeld` runs; then lets delivery go on and waits for the commit to return. For tests of
/// delivery that falls behind the log: commits made in `whileHeld` with a small
/// `Options.logRetention` prune records before this process reads them.
///
/// ```swift
/// try holdingDelivery(of: key, at: 2, committing: 2, in: store) {
///     for value in 3...5 { store[key] = value }  // Each prunes all but the newest.
/// }
/// ```
public func holdingDelivery(
    of key: PersistentDefaults.Key<Int>, at sequence: UInt64, committing value: Int, in store: PersistentDefaults,
    whileHeld: () throws -> Void
) throws {
    let held = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)
    let returned = DispatchSemaphore(value: 0)
    let blocker = store.observe(key) { change in
        guard change.sequence == sequence else { return }
        held.signal()
        _ = release.wait(timeout: .now() + 30)
    }
    defer { blocker.cancel() }
    Thread {
        store[key] = value
        returned.signal()
    }.start()
    guard held.wait(timeout: .now() + 30) == .success else {
        release.signal()
        throw DeliveryHoldError.notHeld(sequence: sequence)
    }
    do {
        try whileHeld()
    } catch {
        release.signal()
        throw error
    }
    release.signal()
    guard returned.wait(timeout: .now() + 30) == .success else { throw DeliveryHoldError.commitDidNotReturn }
}

/// Why ``holdingDelivery(of:at:committing:in:whileHeld:)`` failed.
public enum DeliveryHoldError: Error {
    /// The record was not delivered within 30 s.
    case notHeld(sequence: UInt64)
    /// The held commit did not return within 30 s of the release.
    case commitDidNotReturn
}
