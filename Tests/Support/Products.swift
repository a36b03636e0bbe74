import Foundation

/// Where the package's built executables are, found from the running executable.
///
/// ```swift
/// let fixture = Products.url("pd-fixture")  // next to the test bundle or the driver
/// ```
public enum Products {
    /// The running executable itself (pdbench starts copies of itself as child processes).
    public static let currentExecutable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()

    /// The build products directory: the nearest directory above the running executable that
    /// holds `pd-fixture` or `pdinspect` (tests run from `<products>/<Package>PackageTests.xctest`),
    /// else the running executable's own directory.
    public static let directory: URL = {
        let start = currentExecutable.deletingLastPathComponent()
        var directory = start
        while directory.path != "/" {
            for marker in ["pd-fixture", "pdinspect"]
            where FileManager.default.isExecutableFile(atPath: directory.appendingPathComponent(marker).path) {
                return directory
            }
            directory.deleteLastPathComponent()
        }
        return start
    }()

    /// The built executable `name` (`pd-fixture`, `pdinspect`, `pd-power-cut-test`, …).
    public static func url(_ name: String) -> URL { directory.appendingPathComponent(name) }

    /// The test fixture that writes to a store as another process would (`Tests/Fixtures/pd-fixture`).
    public static var fixture: URL { url("pd-fixture") }

    /// The shipped inspection tool.
    public static var pdinspect: URL { url("pdinspect") }

    /// Whether these products are built with ThreadSanitizer (`tools/tsan`): the running
    /// executable, built with them, has its runtime linked in.
    public static let areThreadSanitized: Bool = {
        guard let handle = dlopen(nil, RTLD_NOW) else { return false }
        defer { dlclose(handle) }
        return dlsym(handle, "__tsan_init") != nil
    }()
}
