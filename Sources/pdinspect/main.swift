import PDInspectCore
import PersistentDefaults

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Everything lives in PDInspectCore; this only connects it to the process. (A store given to
// pdinspect may be damaged: the library makes a fault inside its guarded reads an error of that
// read, not a crash, in every process that opens a store.)
// The arguments' bytes, not `CommandLine.arguments`, which repairs bytes that are not UTF-8.
let argumentBytes = stride(from: 1, to: Int(CommandLine.argc), by: 1).map { index in
    CommandLine.unsafeArgv[index].map { Array(UnsafeRawBufferPointer(start: $0, count: strlen($0))) } ?? []
}
exit(Runner().run(argumentBytes: argumentBytes).rawValue)
