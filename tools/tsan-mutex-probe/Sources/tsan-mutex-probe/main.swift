// A correct program that ThreadSanitizer flags: every access to the dictionary happens inside
// `Mutex.withLock`, yet TSan reports "Swift access race" because the toolchain's prebuilt
// Synchronization module (futex-based Mutex on Linux) is not instrumented, so TSan never sees
// the lock. Run by tools/tsan to tell such reports from real races.
import Dispatch
import Synchronization

final class Box: Sendable { let table = Mutex<[String: Int]>([:]) }
let box = Box()
DispatchQueue.concurrentPerform(iterations: 8) { thread in
    for step in 0..<2_000 { box.table.withLock { $0["k\(step % 7)", default: 0] += thread } }
}
print(box.table.withLock { $0.count })
