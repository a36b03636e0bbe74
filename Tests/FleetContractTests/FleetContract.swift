import PersistentDefaults
import Testing

// The fleet API (`EtcdMirror`), exactly as a user writes it in their own module (this test target
// imports nothing but PersistentDefaults). It must compile; its behaviour is tested against a
// real etcd in PersistentDefaultsTests/MirrorTests. The two bare reads of that code
// (`store[.maxConnections]`, `mirror.state`) carry `_ =` here: as bare statements they compile
// too, with Swift's "unused" warning, and this package builds without warnings.

extension PersistentDefaults.Keys {
    static let maxConnections = Key<Int>("fleet.maxConnections", default: 100)
    static let banner = Key<String>("fleet.banner", default: "")
}

func fleetContract() async throws {
    let store = try PersistentDefaults(path: "/var/lib/myservice/settings")
    let mirror = try EtcdMirror(
        store: store,
        endpoints: ["http://127.0.0.1:2379"],  // several members: fails over between them
        etcdPrefix: "/fleet/myservice/",  // etcd key /fleet/myservice/<name> …
        localPrefix: "fleet.")  // … is the local key fleet.<name>
    try await mirror.start()  // returns once a consistent copy is applied; then follows etcd

    _ = store[.maxConnections]  // a local LMDB read, as fast as any other key
    let token = store.observe(.maxConnections) { change in print(change.newValue) }  // fires on remote changes

    try await mirror.set(200, for: .maxConnections)  // to etcd; returns once applied locally
    try await mirror.update(.maxConnections) { $0 + 1 }  // compare-and-swap on the key's etcd revision, retried
    try await mirror.write { tx in  // one etcd transaction, one local commit everywhere
        tx[.maxConnections] = 300
        tx[.banner] = "maintenance at 22:00"
    }
    _ = mirror.state  // .live(revision:), .reconnecting(since:lastRevision:), … (more cases allowed)
    try await mirror.stop()
    _ = token
}

@Test func theFleetAPICompilesInAUsersModule() {
    let example: () async throws -> Void = fleetContract
    #expect(type(of: example) == (() async throws -> Void).self)
}
