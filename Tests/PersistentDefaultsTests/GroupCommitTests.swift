import Foundation
import PDTestSupport
import PersistentDefaults
import Testing

@Suite struct GroupCommitTests {
    @Test func concurrentDurableSetsShareCommitsAndAllArrive() async throws {
        try await withTemporaryDirectoryAsync { path in
            let store = try PersistentDefaults(path: path)  // .sync
            let changes = Events<String>()
            let token = store.observeCommits { record in
                for key in record.changedKeys { changes.append(key) }
            }
            await withTaskGroup(of: Void.self) { group in
                for thread in 0..<8 {
                    group.addTask {
                        let key = PersistentDefaults.Key<Int>("writer\(thread)", default: -1)
                        for value in 0..<40 {
                            try? store.set(value, for: key)
                            // Each call returns after its own write committed.
                            #expect(store[key] == value)
                        }
                    }
                }
            }
            for thread in 0..<8 {
                #expect(store[PersistentDefaults.Key<Int>("writer\(thread)", default: -1)] == 39)
            }
            #expect(changes.all.count == 320)  // every change observed exactly once
            #expect(try store.lastSequence() <= 320)
            #expect(try store.verify().isEmpty)
            _ = token
        }
    }

    @Test func anObserverThatWritesWhileLeadingDoesNotDeadlock() throws {
        try withTemporaryStore { store, _, _ throws in
            let mirror = PersistentDefaults.Key<Int>("mirror", default: 0)
            let token = store.observe(.launchCount) { change in
                try? store.set(change.newValue * 10, for: mirror)
            }
            for value in 1...5 { try store.set(value, for: .launchCount) }
            // Usually delivered before `set` returns; when the watcher of other processes'
            // commits is delivering at that moment, it delivers this commit too, and `set` may
            // return first (Observing.md). Under ThreadSanitizer this read 20 once.
            #expect(eventually { store[mirror] == 50 })
            #expect(throws: PersistentDefaultsError.nestedWrite) {
                try store.write { _ in try store.set(1, for: .launchCount) }
            }
            // Inside its own read scope a thread writes directly instead of waiting for a leader.
            try store.read { _ in try store.set(7, for: .launchCount) }
            #expect(store[.launchCount] == 7)
            _ = token
        }
    }
}
