import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

/// Inside `read { }`, after another process grew the map: this process cannot adopt the larger
/// map until the scope ends, and no new read can begin. Reads that do not go through the
/// snapshot returned the key's default and reported `MDB_MAP_RESIZED`, and an observer
/// registered there started without a baseline and missed its key's next change (both found by
/// an audit; each test failed before the fix). They are now answered from the scope's snapshot.
@Suite(.serialized) struct GrownMapInsideReadTests {
    static let counter = PersistentDefaults.Key<Int>("counter", default: 0)
    static let marker = PersistentDefaults.Key<Int>("marker", default: 0)
    static let blob = PersistentDefaults.Key<Data>("blob", default: Data())

    @Test func readsOutsideTheSnapshotAreAnsweredFromIt() throws {
        try withTemporaryStore { store, path, log throws in
            store[Self.counter] = 1
            try store.read { snapshot in
                try setFromAnotherProcess(path, "counter", 7)
                #expect(store[Self.counter] == 7, "a new read sees the newest commit")
                try growTheMapFromAnotherProcess(path)
                // A new read cannot begin now: the scope's commit, not the default (0).
                #expect(store[Self.counter] == 1)
                #expect(try store.value(for: Self.counter) == 1)
                #expect(try store.read { $0[Self.counter] } == 1)
                #expect(snapshot[Self.counter] == 1)
                // Writing needs the larger map: a clear error, nothing written.
                #expect(throws: PersistentDefaultsError.self) { try store.set(9, for: Self.counter) }
            }
            // The scope ended: the map is adopted and reads see the newest commit again.
            #expect(store[Self.counter] == 7)
            #expect(try store.value(for: Self.blob).count == 4 << 20)
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// A key observer registered in the scope starts at the snapshot's value and is told of
    /// every change after it exactly once: also of a commit that this process delivered to its
    /// other observers before the registration (read again for it once the scope ends). A
    /// commit observer registered there gets no record twice.
    @Test func anObserverRegisteredThereMissesNoChangeAfterTheSnapshot() throws {
        try withTemporaryStore { store, path, log throws in
            store[Self.counter] = 1
            let early = Guarded<[String]>([])
            let late = Guarded<[String]>([])
            let lateCommits = Guarded<[UInt64]>([])
            let markers = Guarded<[Int]>([])
            let earlyToken = store.observe(Self.counter) { change in
                early.withLock { $0.append("\(change.oldValue)→\(change.newValue)") }
            }
            let markerToken = store.observe(Self.marker) { change in markers.withLock { $0.append(change.newValue) } }
            var lateTokens: [ObservationToken] = []
            try store.read { _ in
                try setFromAnotherProcess(path, "counter", 7)
                // Delivered inside the scope, before the growth: delivery has passed the snapshot.
                #expect(eventually { early.withLock { $0 } == ["1→7"] }, "\(early.withLock { $0 })")
                try growTheMapFromAnotherProcess(path)
                lateTokens.append(
                    store.observe(Self.counter) { change in
                        late.withLock { $0.append("\(change.oldValue)→\(change.newValue)") }
                    })
                lateTokens.append(
                    store.observeCommits { record in lateCommits.withLock { $0.append(record.sequence) } })
            }
            #expect(eventually { late.withLock { $0 } == ["1→7"] }, "\(late.withLock { $0 })")
            try setFromAnotherProcess(path, "counter", 8)
            #expect(eventually { early.withLock { $0 }.count == 2 && late.withLock { $0 }.count == 2 })
            // A later commit of another key, once delivered, shows that nothing more is coming.
            try setFromAnotherProcess(path, "marker", 1)
            #expect(eventually { markers.withLock { $0 } == [1] })
            #expect(early.withLock { $0 } == ["1→7", "7→8"])
            #expect(late.withLock { $0 } == ["1→7", "7→8"])
            let sequences = lateCommits.withLock { $0 }
            #expect(sequences == Array(Set(sequences)).sorted(), "each record once, in order: \(sequences)")
            #expect(sequences.suffix(2) == [try store.lastSequence() - 1, try store.lastSequence()])
            #expect(log.all.isEmpty, "\(log.all)")
            earlyToken.cancel()
            markerToken.cancel()
            for token in lateTokens { token.cancel() }
        }
    }

    /// Each store keeps two thread-local keys (`pthread_key_create`). With none left (past
    /// `PTHREAD_KEYS_MAX`, about 500 stores open in one process) the open throws instead of
    /// sharing another key (a failed create left the variable holding the previous key, so two
    /// per-thread states aliased), and works again once keys are free. In a child process: the
    /// keys are taken from the whole process.
    @Test func anOpenWithoutFreeThreadKeysThrowsAndLaterOpensWork() throws {
        try withTemporaryDirectory { path in
            let result = try runFixture(["open-without-thread-keys", path])
            #expect(result.status == 0, "\(result.output)")
            #expect(result.output.contains("open: pthread_key_create failed"), "\(result.output)")
            #expect(result.output.contains("again: 1"), "\(result.output)")
        }
    }
}
