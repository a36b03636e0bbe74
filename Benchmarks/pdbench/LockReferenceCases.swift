import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `reference/sync/…`: what the synchronisation on the store's read path costs by itself, per
/// get: a `pthread_rwlock` read lock and unlock, two thread-specific updates, and two `Mutex`
/// sections (popping and pushing the pooled read transaction).
let lockReferenceCases: [BenchmarkCase] = [
    BenchmarkCase(name: "reference/sync/rwlock-read-pair") { context in
        let lock = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)
        defer { lock.deallocate() }
        pthread_rwlock_init(lock, nil)
        defer { pthread_rwlock_destroy(lock) }
        let samples = measure(.fast(quick: context.quick)) { _ in
            pthread_rwlock_rdlock(lock)
            pthread_rwlock_unlock(lock)
        }
        return [Measurement("reference/sync/rwlock-read-pair", samples: samples)]
    },
    BenchmarkCase(name: "reference/sync/thread-specific-2-updates") { context in
        var key: pthread_key_t = 0
        pthread_key_create(&key, nil)
        defer { pthread_key_delete(key) }
        let samples = measure(.fast(quick: context.quick)) { _ in
            let state = Int(bitPattern: pthread_getspecific(key))
            pthread_setspecific(key, UnsafeRawPointer(bitPattern: state + 2))
            let again = Int(bitPattern: pthread_getspecific(key))
            pthread_setspecific(key, UnsafeRawPointer(bitPattern: again - 2))
        }
        return [Measurement("reference/sync/thread-specific-2-updates", samples: samples)]
    },
    BenchmarkCase(name: "reference/sync/mutex-pop-push") { context in
        let pool = Mutex<[Int]>([1])
        var sum = 0
        let samples = measure(.fast(quick: context.quick)) { _ in
            let value = pool.withLock { $0.popLast() } ?? 0
            sum &+= value
            pool.withLock { $0.append(value) }
        }
        blackHole(sum)
        return [Measurement("reference/sync/mutex-pop-push", samples: samples)]
    },
]
