import Foundation

/// The JSON encoders and decoder `pdinspect` uses everywhere.
enum JSONCoding {
    private static let nonFinite = (positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")

    /// One line, sorted keys: for `log --follow`, `watch` and stored JSON values.
    static var compact: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.nonConformingFloatEncodingStrategy = .convertToString(
            positiveInfinity: nonFinite.positiveInfinity, negativeInfinity: nonFinite.negativeInfinity,
            nan: nonFinite.nan)
        return encoder
    }

    /// Indented, sorted keys: for documents.
    static var pretty: JSONEncoder {
        let encoder = compact
        encoder.outputFormatting.insert(.prettyPrinted)
        return encoder
    }

    static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(
            positiveInfinity: nonFinite.positiveInfinity, negativeInfinity: nonFinite.negativeInfinity,
            nan: nonFinite.nan)
        return decoder
    }
}
