// swift-tools-version:6.0
import PackageDescription
let package = Package(name: "tsan-mutex-probe", targets: [.executableTarget(name: "tsan-mutex-probe")])
