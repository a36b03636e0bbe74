import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

/// An error of one store met inside another store's write transaction or read scope on the same
/// thread: the first store's handler (the user's code) must not run while the other store's
/// writer lock or snapshot is held, as it does not for its own store's.
@Suite struct CrossStoreErrorTests {
    static let broken = PersistentDefaults.Key<Int>("broken", default: -1)
    static let counter = PersistentDefaults.Key<Int>("counter", default: 0)

    /// Stores A and B; A's handler records whether B's gate is held on its thread (inside B's
    /// write or read scope) and writes to B, which inside B's write throws `nestedWrite`.
    private static func withTwoStores(
        _ body: (_ a: PersistentDefaults, _ b: PersistentDefaults, _ calls: Guarded<[String]>) throws -> Void
    ) throws {
        try withTemporaryDirectory { pathA throws in
            try withTemporaryDirectory { pathB throws in
                let calls = Guarded<[String]>([])
                let storeB = Guarded<PersistentDefaults?>(nil)
                var optionsA = PersistentDefaults.Options()
                optionsA.errorHandler = { error in
                    guard let b = storeB.withLock({ $0 }) else { return }
                    let insideB = b.core.environment.gate.isHeldByCurrentThread
                    var wrote = "wrote"
                    do { try b.set(7, for: Self.counter) } catch { wrote = "\(error)" }
                    calls.withLock { $0.append("inside B: \(insideB), \(wrote)") }
                }
                let a = try PersistentDefaults(path: pathA, options: optionsA)
                let b = try PersistentDefaults(path: pathB)
                storeB.withLock { $0 = b }
                defer { storeB.withLock { $0 = nil } }
                try a.setStoredValue(.string("not a number"), named: Self.broken.name)
                try body(a, b, calls)
            }
        }
    }

    @Test func aHandlerRunsAfterAnotherStoresWriteTransactionInWhichItsErrorWasMet() throws {
        try Self.withTwoStores { a, b, calls in
            let read = try b.write { tx in
                tx[Self.counter] = 1
                return a[Self.broken]
            }
            #expect(read == -1)
            #expect(calls.withLock { $0 } == ["inside B: false, wrote"])
            #expect(b[Self.counter] == 7)
        }
    }

    @Test func aHandlerRunsAfterAnotherStoresReadScopeInWhichItsErrorWasMet() throws {
        try Self.withTwoStores { a, b, calls in
            let read = try b.read { snapshot in (snapshot[Self.counter], a[Self.broken]) }
            #expect(read.0 == 0 && read.1 == -1)
            #expect(calls.withLock { $0 } == ["inside B: false, wrote"])
        }
    }

    /// Nested: A's error inside B's write inside A's read scope waits for the outermost scope.
    @Test func aHandlerWaitsForTheOutermostScopeOfAnyStore() throws {
        try Self.withTwoStores { a, b, calls in
            try a.read { _ in
                try b.write { tx in
                    tx[Self.counter] = 1
                    _ = a[Self.broken]
                }
                #expect(calls.withLock { $0 }.isEmpty, "the handler ran inside A's read scope")
            }
            #expect(calls.withLock { $0 } == ["inside B: false, wrote"])
        }
    }

    /// Under contention: 8 threads (more than cores) fail writes to each store inside the other
    /// one's write transactions and read scopes; each handler checks that its thread is in no
    /// store's scope and writes to the other store (which would throw `nestedWrite` inside its
    /// write). Every failure reaches its store's handler exactly once.
    @Test func handlersOfTwoStoresRunOutsideEachOthersScopesUnderContention() throws {
        try withTemporaryDirectory { pathA throws in
            try withTemporaryDirectory { pathB throws in
                let stores = Guarded<(a: PersistentDefaults?, b: PersistentDefaults?)>((nil, nil))
                let calls = Guarded<(a: Int, b: Int)>((0, 0))
                let problems = Guarded<[String]>([])
                func handler(_ name: String) -> @Sendable (PersistentDefaultsError) -> Void {
                    { error in
                        let held = stores.withLock { [$0.a, $0.b] }.contains {
                            $0?.core.environment.gate.isHeldByCurrentThread == true
                        }
                        if held {
                            problems.withLock { $0.append("\(name)'s handler ran inside a scope") }
                        }
                        guard case .valueTooLarge = error else {
                            problems.withLock { $0.append("\(name): \(error)") }
                            return
                        }
                        let other = stores.withLock { name == "A" ? $0.b : $0.a }
                        do { try other?.write { $0[Self.counter] += 1 } } catch {
                            problems.withLock { $0.append("\(name)'s handler could not write: \(error)") }
                        }
                        calls.withLock { if name == "A" { $0.a += 1 } else { $0.b += 1 } }
                    }
                }
                var optionsA = PersistentDefaults.Options()
                optionsA.maxValueSize = 64
                optionsA.errorHandler = handler("A")
                var optionsB = optionsA
                optionsB.errorHandler = handler("B")
                let a = try PersistentDefaults(path: pathA, options: optionsA)
                let b = try PersistentDefaults(path: pathB, options: optionsB)
                stores.withLock { $0 = (a, b) }
                defer { stores.withLock { $0 = (nil, nil) } }
                let big = PersistentDefaults.Key<Data>("big", default: Data())
                let rounds = 100
                onJoinedThreads(8) { _ in
                    for _ in 0..<rounds {
                        // A's failure inside B's write; B's inside A's read scope.
                        try? b.write { tx in
                            tx[Self.counter] += 1
                            a[big] = Data(count: 100)
                        }
                        try? a.read { _ in b[big] = Data(count: 100) }
                    }
                }
                #expect(problems.withLock { $0 }.isEmpty, "\(problems.withLock { $0 }.prefix(5))")
                #expect(calls.withLock { $0 }.a == 8 * rounds && calls.withLock { $0 }.b == 8 * rounds)
                // B: one increment per round and thread, and one per handler call of A.
                #expect(b[Self.counter] == 8 * rounds * 2)
                #expect(a[Self.counter] == 8 * rounds)
            }
        }
    }
}
