import Foundation
import PersistentDefaults

/// The JSON encoders and decoder `pdinspect` uses everywhere: the library's typed JSON form
/// (sorted keys, non-finite doubles as `inf`, `-inf`, `nan`).
enum JSONCoding {
    /// One line, sorted keys: for `log --follow`, `watch` and stored JSON values.
    static var compact: JSONEncoder { StoredValue.typedJSONEncoder() }

    /// Indented, sorted keys: for documents.
    static var pretty: JSONEncoder {
        let encoder = compact
        encoder.outputFormatting.insert(.prettyPrinted)
        return encoder
    }

    static var decoder: JSONDecoder { StoredValue.typedJSONDecoder() }
}
