import PDInspectCore
import PersistentDefaults

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Everything lives in PDInspectCore; this only connects it to the process. A store given to
// pdinspect may be damaged: a fault while LMDB reads it is an error of that read, not a crash.
try? PersistentDefaults.guardReadsAgainstDamagedPages()
exit(Runner().run(arguments: Array(CommandLine.arguments.dropFirst())).rawValue)
