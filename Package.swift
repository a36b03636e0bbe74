// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "PersistentDefaults",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "PersistentDefaults", targets: ["PersistentDefaults"]),
        .executable(name: "pdinspect", targets: ["pdinspect"]),
        .executable(name: "pdbench", targets: ["pdbench"]),
    ],
    targets: [
        .systemLibrary(
            name: "CLMDB",
            path: "Sources/CLMDB",
            pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"])]
        ),
        // Atomics on a mapped word and the futex system call, for the wake-up channel.
        .systemLibrary(name: "CPlatform", path: "Sources/CPlatform"),
        // libcurl, for the etcd client of `EtcdMirror` (HTTP/1.1 to etcd's v3 JSON gateway).
        .systemLibrary(
            name: "CCurl",
            path: "Sources/CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        // LMDB's internal assertions on a damaged page as an error code instead of an abort.
        .target(name: "CLMDBGuard", dependencies: ["CLMDB"]),
        .target(name: "PersistentDefaults", dependencies: ["CLMDB", "CLMDBGuard", "CPlatform", "CCurl"]),
        .target(name: "PDInspectCore", dependencies: ["PersistentDefaults"]),
        .executableTarget(name: "pdinspect", dependencies: ["PDInspectCore", "PersistentDefaults"]),

        // Not shipped: examples, test support, test fixtures, reliability drivers, the benchmark.
        // The README's main job, run by `tools/demo`.
        .executableTarget(name: "pd-demo", dependencies: ["PersistentDefaults"], path: "Examples/pd-demo"),
        // What the test suites, the fixture, the reliability drivers and pdbench share: finding a
        // built product, running a child process, temporary directories, exit codes, etcd
        // members, raw LMDB writes, and the kill-test, power-cut and fuzz logic.
        .target(name: "PDTestSupport", dependencies: ["PersistentDefaults", "CLMDB"], path: "Tests/Support"),
        // A child process for the tests: writes to a store as another process would (one mode
        // per job, listed in its main.swift).
        .executableTarget(
            name: "pd-fixture", dependencies: ["PersistentDefaults", "PDTestSupport"], path: "Tests/Fixtures/pd-fixture"
        ),
        // Reliability drivers, run by tools/crash-test, tools/power-cut and tools/fuzz.
        .executableTarget(
            name: "pd-kill-test", dependencies: ["PDTestSupport"], path: "tools/reliability/pd-kill-test"),
        .executableTarget(
            name: "pd-power-cut-test", dependencies: ["PDTestSupport"], path: "tools/reliability/pd-power-cut-test"),
        .executableTarget(
            name: "pd-decoder-fuzz", dependencies: ["PDTestSupport"], path: "tools/reliability/pd-decoder-fuzz"),
        .systemLibrary(
            name: "CSQLite",
            path: "Benchmarks/CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        .executableTarget(
            name: "pdbench",
            dependencies: ["PersistentDefaults", "PDTestSupport", "CLMDB", "CPlatform", "CSQLite"],
            path: "Benchmarks/pdbench"
        ),
        .testTarget(
            name: "PersistentDefaultsTests",
            dependencies: [
                "PersistentDefaults", "PDTestSupport", "CLMDB", "pd-fixture", "pd-power-cut-test", "pdinspect",
            ]),
        // The fleet API as an application uses it, compiled in a module that imports only PersistentDefaults.
        .testTarget(name: "FleetContractTests", dependencies: ["PersistentDefaults"]),
        .testTarget(
            name: "pdinspectTests", dependencies: ["PDInspectCore", "PersistentDefaults", "PDTestSupport", "pdinspect"]),
    ],
    swiftLanguageModes: [.v6]
)
