import Foundation

/// The mirror's two threads — the watch, and the periodic consistency check — and the first copy.
extension EtcdMirror {
    /// Reads the prefix and either applies it (first start, another cluster, compacted history,
    /// a history that went back) or prepares the catch-up of a restart. Returns the revision
    /// `start()` waits for. Runs on a request thread.
    func initialCopy() throws -> Int64 {
        let deadline = ContinuousClock.now + options.startTimeout
        while true {
            // Read before etcd is asked: a revision recorded then that is newer than etcd's answer
            // (a linearizable read) means etcd's history went back; one recorded after may be a
            // newer revision that another mirror of the store applied meanwhile.
            let before = try store.core.environment.withRead { try ownRecord(in: $0) }
            let snapshot = try readPrefix(until: deadline)
            let sameCluster = before.clusterID.isEmpty || before.clusterID == snapshot.header.clusterID
            if sameCluster, snapshot.header.revision < before.revision {
                guard try applyAfterHistoryWentBack(snapshot, before: before) else { continue }
                return snapshot.header.revision
            }
            let record = try store.core.environment.withRead { try ownRecord(in: $0) }
            if record.revision == 0 || !sameCluster {
                try applySnapshot(snapshot)
            } else if record.revision >= snapshot.header.revision {
                try learnUnparsable(from: desiredValues(snapshot).0)
                noteApplied(record.revision)
            } else {
                // A restart: the watch resumes after the recorded revision; `start()` returns once
                // the local copy equals this snapshot or the watch went past it.
                let (wanted, _) = desiredValues(snapshot)
                try learnUnparsable(from: wanted)
                status.withLock { $0.catchUp = wanted }
                noteApplied(record.revision)
                if try localCopyMatches(wanted) { finishCatchUp() }
            }
            return snapshot.header.revision
        }
    }

    /// The prefix at etcd's newest revision, retried while no endpoint answers until `deadline`.
    private func readPrefix(until deadline: ContinuousClock.Instant) throws -> EtcdRangeResponse {
        while true {
            do {
                return try client.range(prefix: etcdPrefixBytes)
            } catch EtcdMirrorError.unavailable(let endpoints, let reason) {
                guard ContinuousClock.now < deadline, !stopSignal.isRaised else {
                    throw EtcdMirrorError.unavailable(endpoints: endpoints, reason: reason)
                }
                if stopSignal.wait(for: options.maxBackoff) { throw EtcdMirrorError.notRunning }
            }
        }
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

    /// Watches the prefix from the applied revision on, applying each newer revision as it arrives;
    /// on failure moves to the next endpoint after a pause that doubles up to
    /// ``Options/maxBackoff`` (no busy loop), and re-reads the prefix after a compaction or when
    /// etcd's history went back.
    func watchLoop() {
        var endpoint = client.preferredIndex
        var failures = 0
        while !stopSignal.isRaised {
            status.withLock { status in
                status.watchEndpoint = endpoint
                status.watchStalled = false
            }
            let connected = ContinuousClock.now
            var failure: String?
            var wentBack = false
            let end: EtcdClient.WatchEnd
            do {
                // Read before the request, for the first response to be compared with.
                let before = try store.core.environment.withRead { try ownRecord(in: $0) }
                // From the applied revision, not the next: a compaction drops the tombstones at
                // its own revision, so after a compaction at the next revision a watch from there
                // is accepted and never delivers that revision's deletions. From the applied one
                // it is refused as compacted (the prefix is then read again); the applied
                // revision's events are passed over.
                let start = max(appliedRevision, 1)
                var first = true
                end = client.watch(
                    endpointIndex: endpoint, prefix: etcdPrefixBytes, startRevision: start, wake: wake,
                    shouldStop: { stopSignal.isRaised || status.withLock { $0.watchStalled } },
                    onResult: { result in
                        do {
                            // etcd's history can go back only while no connection is open: the
                            // first response of each (which confirms the watch) tells.
                            if first {
                                first = false
                                wentBack = try self.followIfHistoryWentBack(header: result.header, before: before)
                                if wentBack { return false }
                            }
                            try self.handle(result)
                            return !self.stopSignal.isRaised
                        } catch {
                            failure = "applying a revision failed: \(error)"
                            self.store.core.reporter.report(error)
                            return false
                        }
                    })
            } catch {
                end = .failed("reading the mirror's record failed: \(error)")
                store.core.reporter.report(error)
            }
            if stopSignal.isRaised { return }
            // The local copy equals etcd's new history: watch from its revision at once.
            if wentBack { continue }
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

    /// Whether etcd's history went back: the first response to a watch request, made when the
    /// store recorded `before`, carries an older revision than the mirror applied. Then makes the
    /// local copy equal to etcd's newest state (``applyAfterHistoryWentBack(_:before:)``).
    ///
    /// etcd's revisions never decrease while it keeps its data, but a watch is answered by the
    /// member it talks to, which may not have applied the newest revisions yet: a linearizable
    /// read tells such a member apart. Returns true also when the store moved meanwhile (the
    /// next connection checks again), false when etcd did not go back.
    private func followIfHistoryWentBack(header: EtcdHeader, before: MirrorRecord) throws -> Bool {
        let applied = max(appliedRevision, before.revision)
        guard header.revision < applied else { return false }
        let snapshot = try client.range(prefix: etcdPrefixBytes)
        guard snapshot.header.revision < applied else { return false }
        // False: another mirror of the store applied a revision meanwhile; the next connection
        // reads the record again and checks again.
        _ = try applyAfterHistoryWentBack(snapshot, before: before)
        return true
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

    /// Every ``Options/consistencyCheckInterval``, compares the local copy with etcd, at the
    /// applied revision and at the newest.
    func checkLoop() {
        var differing: Int64?
        while !stopSignal.wait(for: options.consistencyCheckInterval) {
            checkConsistency()
            differing = checkWatchDelivers(differedAt: differing)
        }
    }

    /// Compares the local copy with etcd's newest state. When they differed at the previous
    /// check too and the watch applied nothing since (`previous`: the applied revision then),
    /// the watch waits on a member that hangs — its connection stays open, and the kernel still
    /// answers TCP keep-alive — while the others go on: it is made to move to the next endpoint.
    /// Returns the applied revision when they differ, nil when they do not or cannot be compared.
    private func checkWatchDelivers(differedAt previous: Int64?) -> Int64? {
        guard case .live = state else { return nil }
        let applied = appliedRevision
        do {
            let newest = try client.range(prefix: etcdPrefixBytes)
            guard newest.header.revision > applied, try !localCopyMatches(desiredValues(newest).0) else { return nil }
        } catch {
            return nil  // The watch notices unreachable members itself.
        }
        guard previous == applied else { return applied }
        status.withLock { $0.watchStalled = true }
        wake.wake()
        return nil
    }

    /// Reads the prefix at the revision the store holds and, when the local copy differs (a
    /// dropped watch event), makes it equal in one transaction and reports the keys repaired
    /// through ``PersistentDefaultsError/mirrorRepaired(localPrefix:revision:keys:)``.
    /// Returns the keys repaired (empty when none), nil when it could not check.
    @discardableResult
    func checkConsistency() -> [String]? {
        let epoch = status.withLock { $0.epoch }
        do {
            let record = try store.core.environment.withRead { try ownRecord(in: $0) }
            let revision = record.revision
            guard revision > 0 else { return nil }
            let snapshot: EtcdRangeResponse
            do {
                snapshot = try client.range(prefix: etcdPrefixBytes, revision: revision)
            } catch is EtcdCompacted {
                // The revision is gone: only a newer one can be checked, once the watch reaches it.
                return nil
            } catch EtcdMirrorError.etcd(_, let message) where message.contains("future revision") {
                // etcd's history went back: the watch makes the copy again when it reconnects.
                return nil
            }
            recordContact(progressRevision: nil)
            let (wanted, _) = desiredValues(snapshot)
            if try localCopyMatches(wanted), recordsUnparsable(of: wanted, in: record) { return [] }
            guard let repaired = try applySnapshot(snapshot, repairAt: revision, epoch: epoch) else { return nil }
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
