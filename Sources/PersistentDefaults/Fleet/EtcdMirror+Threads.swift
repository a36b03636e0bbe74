import Foundation

/// The mirror's two threads — the watch, and the periodic consistency check — and the first copy.
extension EtcdMirror {
    /// Reads the prefix and either applies it (first start, another cluster, compacted history)
    /// or prepares the catch-up of a restart. Returns the revision `start()` waits for. Runs on a
    /// request thread.
    func initialCopy() throws -> Int64 {
        let deadline = ContinuousClock.now + options.startTimeout
        var snapshot: EtcdRangeResponse?
        while snapshot == nil {
            do {
                snapshot = try client.range(prefix: etcdPrefixBytes)
            } catch EtcdMirrorError.unavailable(let endpoints, let reason) {
                guard ContinuousClock.now < deadline, !stopSignal.isRaised else {
                    throw EtcdMirrorError.unavailable(endpoints: endpoints, reason: reason)
                }
                if stopSignal.wait(for: options.maxBackoff) { throw EtcdMirrorError.notRunning }
            }
        }
        guard let snapshot else { throw EtcdMirrorError.notRunning }
        let record = try store.core.environment.withRead { try ownRecord(in: $0) }
        let sameCluster = record.clusterID.isEmpty || record.clusterID == snapshot.header.clusterID
        if record.revision == 0 || !sameCluster {
            try applySnapshot(snapshot)
        } else if record.revision >= snapshot.header.revision {
            noteApplied(record.revision)
        } else {
            // A restart: the watch resumes after the recorded revision; `start()` returns once
            // the local copy equals this snapshot or the watch went past it.
            let (wanted, _) = desiredValues(snapshot)
            status.withLock { $0.catchUp = wanted }
            noteApplied(record.revision)
            if try localCopyMatches(wanted) { finishCatchUp() }
        }
        return snapshot.header.revision
    }

    /// Ends the catch-up: the local copy is consistent with etcd at the catch-up revision.
    func finishCatchUp() {
        let ready = status.withLock { status -> [CheckedContinuation<Void, any Error>] in
            guard let catchUp = status.catchUp else { return [] }
            status.catchUp = nil
            status.caughtUp = max(status.caughtUp, catchUp.revision)
            let consistent = max(status.applied, status.caughtUp)
            let ready = status.waiters.filter { $0.value.revision <= consistent }
            for id in ready.keys { status.waiters[id] = nil }
            return ready.values.map(\.continuation)
        }
        for continuation in ready { continuation.resume() }
    }

    func startThreads() {
        guard !stopSignal.isRaised else { return }
        let loops: [(String, @Sendable () -> Void)] = [
            ("watch", { self.watchLoop() }), ("check", { self.checkLoop() }),
        ]
        for (name, body) in loops {
            threadsDone.enter()
            let group = threadsDone
            let thread = Thread {
                body()
                group.leave()
            }
            thread.name = "PersistentDefaults.etcd-\(name)"
            thread.start()
        }
    }

    // MARK: Watch

    /// Watches the prefix from the applied revision + 1, applying each revision as it arrives;
    /// on failure moves to the next endpoint after a pause that doubles up to
    /// ``Options/maxBackoff`` (no busy loop), and re-reads the prefix after a compaction.
    func watchLoop() {
        var endpoint = client.preferredIndex
        var failures = 0
        while !stopSignal.isRaised {
            status.withLock { $0.watchEndpoint = endpoint }
            let connected = ContinuousClock.now
            var failure: String?
            let end = client.watch(
                endpointIndex: endpoint, prefix: etcdPrefixBytes, startRevision: appliedRevision + 1, wake: wake,
                shouldStop: { stopSignal.isRaised },
                onResult: { result in
                    do {
                        try self.handle(result)
                        return !self.stopSignal.isRaised
                    } catch {
                        failure = "applying a revision failed: \(error)"
                        self.store.core.reporter.report(error)
                        return false
                    }
                })
            if stopSignal.isRaised { return }
            switch end {
            case .stopped:
                break
            case .compacted:
                do {
                    try applySnapshot(try client.range(prefix: etcdPrefixBytes))
                    finishCatchUp()
                    continue
                } catch {
                    failure = "re-reading the prefix after a compaction failed: \(error)"
                }
            case .failed(let reason):
                failure = failure ?? reason
            }
            markReconnecting()
            // A connection that lasted a while starts the pauses over.
            failures = ContinuousClock.now - connected > .seconds(10) ? 1 : failures + 1
            endpoint = (endpoint + 1) % client.endpoints.count
            let pause = min(Duration.milliseconds(50) * (1 << min(failures - 1, 10)), options.maxBackoff)
            let jitter = Duration.milliseconds(Int.random(in: 0...max(1, Int(pause / .milliseconds(1)) / 4)))
            if stopSignal.wait(for: pause + jitter) { return }
        }
    }

    /// One watch response: a revision's events, the confirmation of the watch, or a progress
    /// notification (no events: every change up to its revision was delivered).
    private func handle(_ result: EtcdWatchMessage.Result) throws {
        if result.created {
            status.withLock { status in
                if case .reconnecting = status.state { status.state = .live(revision: status.applied) }
            }
            return
        }
        guard !result.events.isEmpty else {
            status.withLock { $0.progress = max($0.progress, result.header.revision) }
            recordContact(progressRevision: result.header.revision)
            checkCatchUp(progress: result.header.revision)
            return
        }
        // etcd never splits a revision over responses; a response may hold several revisions.
        var index = result.events.startIndex
        while index < result.events.endIndex {
            let revision = result.events[index].kv.modRevision
            let end = result.events[index...].firstIndex { $0.kv.modRevision != revision } ?? result.events.endIndex
            try apply(revision: revision, events: Array(result.events[index..<end]), clusterID: result.header.clusterID)
            index = end
        }
        checkCatchUp(progress: nil)
    }

    /// Ends the catch-up of a restart once the local copy matches the snapshot, or the watch
    /// went past its revision.
    private func checkCatchUp(progress: Int64?) {
        guard let catchUp = status.withLock({ $0.catchUp }) else { return }
        if appliedRevision >= catchUp.revision || (progress ?? 0) >= catchUp.revision
            || (try? localCopyMatches(catchUp)) == true
        {
            finishCatchUp()
        }
    }

    private func markReconnecting() {
        status.withLock { status in
            switch status.state {
            case .live, .starting: status.state = .reconnecting(since: Date(), lastRevision: status.applied)
            default: break
            }
        }
    }

    // MARK: Consistency check

    /// Every ``Options/consistencyCheckInterval``, compares the local copy with etcd.
    func checkLoop() {
        while !stopSignal.wait(for: options.consistencyCheckInterval) {
            checkConsistency()
        }
    }

    /// Reads the prefix at the revision the store holds and, when the local copy differs (a
    /// dropped watch event), makes it equal in one transaction and reports the keys repaired
    /// through ``PersistentDefaultsError/mirrorRepaired(localPrefix:revision:keys:)``.
    /// Returns the keys repaired (empty when none), nil when it could not check.
    @discardableResult
    func checkConsistency() -> [String]? {
        do {
            let revision = try store.core.environment.withRead { try ownRecord(in: $0).revision }
            guard revision > 0 else { return nil }
            let snapshot: EtcdRangeResponse
            do {
                snapshot = try client.range(prefix: etcdPrefixBytes, revision: revision)
            } catch is EtcdCompacted {
                // The revision is gone: only a newer one can be checked, once the watch reaches it.
                return nil
            }
            recordContact(progressRevision: nil)
            let (wanted, _) = desiredValues(snapshot)
            if try localCopyMatches(wanted) { return [] }
            guard let repaired = try applySnapshot(snapshot, repairAt: revision) else { return nil }
            if !repaired.isEmpty {
                store.core.reporter.report(
                    PersistentDefaultsError.mirrorRepaired(localPrefix: localPrefix, revision: revision, keys: repaired)
                )
            }
            return repaired
        } catch {
            if !stopSignal.isRaised { store.core.reporter.report(error) }
            return nil
        }
    }
}
