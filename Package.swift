// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "PersistentDefaults",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "PersistentDefaults", targets: ["PersistentDefaults"]),
        .executable(name: "pd-demo", targets: ["pd-demo"]),
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
        .target(name: "PersistentDefaults", dependencies: ["CLMDB", "CPlatform", "CCurl"]),
        .executableTarget(name: "pd-demo", dependencies: ["PersistentDefaults"]),
        .target(name: "PDReliability", dependencies: ["PersistentDefaults"]),
        .executableTarget(name: "pd-worker", dependencies: ["PersistentDefaults", "PDReliability"]),
        .executableTarget(name: "pd-crash", dependencies: ["PDReliability"]),
        .executableTarget(name: "pd-fuzz", dependencies: ["PDReliability"]),
        .executableTarget(name: "pd-power-cut", dependencies: ["PDReliability"]),
        .target(name: "PDInspectCore", dependencies: ["PersistentDefaults"]),
        .executableTarget(name: "pdinspect", dependencies: ["PDInspectCore"]),
        .systemLibrary(
            name: "CSQLite",
            path: "Benchmarks/CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        .executableTarget(
            name: "pdbench",
            dependencies: ["PersistentDefaults", "CLMDB", "CSQLite"],
            path: "Benchmarks/pdbench"
        ),
        .testTarget(
            name: "PersistentDefaultsTests",
            dependencies: ["PersistentDefaults", "PDReliability", "CLMDB", "pd-worker", "pd-power-cut", "pdinspect"]),
        // Issue 16's example, compiled in a module that imports only PersistentDefaults.
        .testTarget(name: "FleetContractTests", dependencies: ["PersistentDefaults"]),
        .testTarget(name: "pdinspectTests", dependencies: ["PDInspectCore", "PersistentDefaults", "pdinspect"]),
    ],
    swiftLanguageModes: [.v6]
)
