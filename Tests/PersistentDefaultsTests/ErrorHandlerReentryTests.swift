import Foundation
import PDTestSupport
import Synchronization
import Testing

@testable import PersistentDefaults

/// An error handler that uses the store it is told about: it runs outside the store's locks, write
/// transactions and read scopes, and is never called again inside itself on its thread.
@Suite(.serialized) struct ErrorHandlerReentryTests {
    /// One call of the handler: the error, whether it ran inside a write transaction of the
    /// store, whether inside any read scope or write transaction of it, and how many calls of the
    /// handler were under way on its thread, itself included.
    private struct Call: Sendable {
        var error: PersistentDefaultsError
        var insideWrite: Bool
        var insideScope: Bool
        var depth: Int
    }

    /// Records the handler's calls; its action runs only in calls less than 10 deep, so that a
    /// handler called again inside itself without end fails the test instead of crashing it.
    private final class Handler: Sendable {
        let calls = Guarded<[Call]>([])
        let store = Guarded<PersistentDefaults?>(nil)
        private let depth = Atomic<Int>(0)
        private let action: @Sendable (PersistentDefaults, PersistentDefaultsError) -> Void

        init(_ action: @escaping @Sendable (PersistentDefaults, PersistentDefaultsError) -> Void) {
            self.action = action
        }

        func handle(_ error: PersistentDefaultsError) {
            let level = depth.add(1, ordering: .relaxed).newValue
            defer { depth.subtract(1, ordering: .relaxed) }
            guard let store = store.withLock({ $0 }) else { return }
            let gate = store.core.environment.gate
            let call = Call(
                error: error, insideWrite: gate.isWritingOnCurrentThread, insideScope: gate.isHeldByCurrentThread,
                depth: level)
            calls.withLock { $0.append(call) }
            if level < 10 { action(store, error) }
        }
    }

    /// Opens a store at `path` whose error handler is `handler`, and breaks the cycle between
    /// them (the store holds the handler, which holds the store) when `body` returns.
    private func withStore(
        at path: String, _ handler: Handler, durability: PersistentDefaults.Durability = .sync,
        options: PersistentDefaults.Options = .init(), _ body: (PersistentDefaults) throws -> Void
    ) throws {
        var options = options
        options.durability = durability
        options.errorHandler = { handler.handle($0) }
        let store = try PersistentDefaults(path: path, options: options)
        handler.store.withLock { $0 = store }
        defer { handler.store.withLock { $0 = nil } }
        try body(store)
    }

    private static let broken = PersistentDefaults.Key<Int>("broken", default: -1)
    private static let errorCount = PersistentDefaults.Key<Int>("errorCount", default: 0)
    private static let other = PersistentDefaults.Key<Int>("other", default: 0)
    private static let blob = PersistentDefaults.Key<Data>("blob", default: Data())

    /// A store whose map (64 KiB) must grow for a write of 1 MiB.
    private static var smallMap: PersistentDefaults.Options {
        var options = PersistentDefaults.Options()
        options.initialMapSize = 64 << 10
        return options
    }

    /// Whether `error` is a decoding failure of the key named `name`.
    private static func isDecodingFailure(_ error: PersistentDefaultsError, of name: String) -> Bool {
        if case .decodingFailed(key: name, _, _) = error { true } else { false }
    }

    /// A value that does not decode, read inside `write { }`, is reported; the handler counts it
    /// in the store through the non-throwing subscript. It ran inside the transaction, where that
    /// write threw `nestedWrite`, which was reported to the handler inside itself, which wrote
    /// again: 10 nested calls, the last 9 for `nestedWrite`, and the count never written (failed
    /// 3 of 3 runs before the fix, in both modes; without the test's depth limit, a stack
    /// overflow).
    @Test(arguments: [false, true])
    func aHandlerThatWritesRunsAfterTheWriteInWhichTheErrorWasReported(bounded: Bool) throws {
        try withTemporaryDirectory { path throws in
            let handler = Handler { store, _ in store[Self.errorCount] += 1 }
            let durability: PersistentDefaults.Durability = bounded ? .bounded(interval: .seconds(10)) : .sync
            try withStore(at: path, handler, durability: durability) { store in
                try store.setStoredValue(.string("not a number"), named: "broken")
                let outcome = Guarded<String>("")
                let returned = returns {
                    do {
                        let read = try store.write { tx in
                            let value = tx[Self.broken]  // does not decode: the default, reported
                            tx[Self.other] = 1
                            return value
                        }
                        outcome.withLock { $0 = "read \(read)" }
                    } catch {
                        outcome.withLock { $0 = "\(error)" }
                    }
                }
                #expect(returned, "the write deadlocked")
                guard returned else { return }
                #expect(outcome.withLock { $0 } == "read -1")
                let calls = handler.calls.withLock { $0 }
                #expect(calls.count == 1, "\(calls.map(\.error))")
                #expect(calls.allSatisfy { !$0.insideWrite && $0.depth == 1 })
                #expect(
                    calls.allSatisfy { if case .decodingFailed(key: "broken", _, _) = $0.error { true } else { false } }
                )
                #expect(store[Self.errorCount] == 1)
                #expect(store[Self.other] == 1)
            }
        }
    }

    /// A handler whose own write always fails (here a value over `Options.maxValueSize`) is told
    /// of that failure once, after it returned, and not again: it was called for it inside
    /// itself, wrote again, and so on (10 nested calls before the fix, 3 of 3 runs; without the
    /// test's depth limit, a stack overflow). The failure of its second write goes to standard
    /// error.
    @Test func aHandlerWhoseOwnWriteKeepsFailingIsToldOnceAndNotCalledInsideItself() throws {
        try withTemporaryDirectory { path throws in
            let big = PersistentDefaults.Key<String>("big", default: "")
            let handler = Handler { store, _ in store[big] = String(repeating: "x", count: 100) }
            var options = PersistentDefaults.Options()
            options.maxValueSize = 16
            options.errorHandler = { handler.handle($0) }
            let store = try PersistentDefaults(path: path, options: options)
            handler.store.withLock { $0 = store }
            defer { handler.store.withLock { $0 = nil } }
            #expect(returns { store[big] = String(repeating: "y", count: 50) }, "the write deadlocked")
            let calls = handler.calls.withLock { $0 }
            #expect(calls.map(\.depth) == [1, 1])
            #expect(
                calls.allSatisfy { if case .valueTooLarge(key: "big", _, limit: 16) = $0.error { true } else { false } }
            )
            #expect(try store.contains(big) == false)
        }
    }

    /// A value that does not decode, read through the snapshot of `read { }`, is reported; the
    /// handler then stores 1 MiB, which needs the map to grow. It ran inside the read scope,
    /// where a write cannot grow the map (that waits for every read of this process to end, the
    /// scope's own included): its write failed with `mapFull`, which was passed to it in turn,
    /// and the value was never stored (failed 3 of 3 runs before the fix: the calls were the
    /// decoding failure and `mapFull`, both inside the scope, and `blob` stayed empty). After
    /// another process grew the map, the handler's reads there saw the scope's old snapshot too.
    @Test func aHandlerRunsAfterTheReadScopeInWhichTheErrorWasReported() throws {
        try withTemporaryDirectory { path throws in
            let big = Data(repeating: 7, count: 1 << 20)
            let handler = Handler { store, error in
                if Self.isDecodingFailure(error, of: "broken") { store[Self.blob] = big }
            }
            try withStore(at: path, handler, options: Self.smallMap) { store in
                try store.setStoredValue(.string("not a number"), named: "broken")
                let outcome = Guarded<String>("")
                let returned = returns {
                    do {
                        let read = try store.read { snapshot in snapshot[Self.broken] }
                        outcome.withLock { $0 = "read \(read)" }
                    } catch {
                        outcome.withLock { $0 = "\(error)" }
                    }
                }
                #expect(returned, "the read deadlocked")
                guard returned else { return }
                #expect(outcome.withLock { $0 } == "read -1")
                let calls = handler.calls.withLock { $0 }
                #expect(calls.count == 1, "\(calls.map(\.error))")
                #expect(calls.allSatisfy { !$0.insideScope && $0.depth == 1 }, "\(calls)")
                #expect(calls.allSatisfy { Self.isDecodingFailure($0.error, of: "broken") })
                #expect(try store.value(for: Self.blob) == big)
            }
        }
    }

    /// A write body that stores 1 MiB in a 64 KiB map runs twice: the first run finds the map
    /// full and is aborted, the map grows, and the body runs again and commits. The errors the
    /// first run reported (a value that does not decode, a nested `store[key] = …` that threw
    /// `nestedWrite`) went with it; the handler hears each error of the committed run once. Before
    /// the fix it heard `nestedWrite` twice (3 of 3 runs: decodingFailed, nestedWrite,
    /// nestedWrite).
    @Test func aWriteBodyRunAgainAfterTheMapGrewReportsItsErrorsOnce() throws {
        try withTemporaryDirectory { path throws in
            let big = Data(repeating: 7, count: 1 << 20)
            let handler = Handler { _, _ in }
            try withStore(at: path, handler, options: Self.smallMap) { store in
                try store.setStoredValue(.string("not a number"), named: "broken")
                let runs = Counter()
                try store.write { tx in
                    runs.increment()
                    #expect(tx[Self.broken] == -1)  // does not decode: reported
                    store[Self.other] = 1  // a nested write: `nestedWrite`, reported
                    tx[Self.blob] = big  // the map is full: the body runs again
                }
                #expect(runs.value == 2)
                let calls = handler.calls.withLock { $0 }
                #expect(calls.count == 2, "\(calls.map(\.error))")
                #expect(calls.first.map { Self.isDecodingFailure($0.error, of: "broken") } == true)
                #expect(calls.last?.error == .nestedWrite, "\(calls.map(\.error))")
                #expect(calls.allSatisfy { !$0.insideScope && $0.depth == 1 })
                #expect(try store.value(for: Self.blob) == big)
                #expect(store[Self.other] == 0)
            }
        }
    }

    /// An error that the handler's own use of the store causes while it handles an error it
    /// caused itself goes to standard error, not to the handler; a value that does not decode
    /// met there counted as reported all the same, so the handler was never told of it when the
    /// app read it later (before the fix, 3 of 3 runs: 2 calls, the later read's decoding failure
    /// of `second` never passed). Here the handler reads `first` for a failed write and `second`
    /// for a decoding failure of `first`; both do not decode.
    @Test func anErrorSentToStandardErrorIsReportedWhenTheAppMeetsItLater() throws {
        try withTemporaryDirectory { path throws in
            let first = PersistentDefaults.Key<Int>("first", default: 0)
            let second = PersistentDefaults.Key<Int>("second", default: 0)
            let big = PersistentDefaults.Key<String>("big", default: "")
            let handler = Handler { store, error in
                if case .valueTooLarge = error { _ = store[first] }
                if Self.isDecodingFailure(error, of: "first") { _ = store[second] }
            }
            var options = PersistentDefaults.Options()
            options.maxValueSize = 16
            try withStore(at: path, handler, options: options) { store in
                try store.setStoredValue(.string("x"), named: "first")
                try store.setStoredValue(.string("y"), named: "second")
                store[big] = String(repeating: "z", count: 50)  // too large: reported
                var calls = handler.calls.withLock { $0 }
                #expect(calls.count == 2, "\(calls.map(\.error))")
                #expect(calls.last.map { Self.isDecodingFailure($0.error, of: "first") } == true)
                #expect(store[second] == 0)  // the app's own read: does not decode
                calls = handler.calls.withLock { $0 }
                #expect(calls.count == 3, "\(calls.map(\.error))")
                #expect(calls.last.map { Self.isDecodingFailure($0.error, of: "second") && $0.depth == 1 } == true)
                #expect(store[second] == 0)  // once per key and reason
                #expect(handler.calls.withLock { $0.count } == 3)
            }
        }
    }
}
