import PDInspectCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Everything lives in PDInspectCore; this only connects it to the process.
exit(Runner().run(arguments: Array(CommandLine.arguments.dropFirst())).rawValue)
