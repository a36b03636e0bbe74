import Foundation
import PersistentDefaults

/// Helpers that make human output aligned and readable.
enum TextTable {
    /// Rows as lines whose columns line up; the last column is not padded.
    static func render(_ rows: [[String]], indent: String = "") -> String {
        guard let columns = rows.map(\.count).max(), columns > 0 else { return "" }
        var widths = [Int](repeating: 0, count: columns)
        for row in rows {
            for (index, cell) in row.enumerated() where index < columns - 1 {
                widths[index] = max(widths[index], cell.count)
            }
        }
        return rows.map { row in
            var line = indent
            for (index, cell) in row.enumerated() {
                let isLast = index == row.count - 1
                line += isLast ? cell : cell.padding(toLength: widths[index], withPad: " ", startingAt: 0) + "  "
            }
            return line + "\n"
        }.joined()
    }

    /// `1.5 MiB (1572864 bytes)`, or `1.5 MiB` when not `exact`.
    static func bytes(_ count: Int, exact: Bool = true) -> String {
        let units = ["bytes", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        if unit == 0 { return "\(count) bytes" }
        let rounded = (value * 10).rounded() / 10
        let number = rounded == rounded.rounded() ? String(Int(rounded)) : String(rounded)
        return "\(number) \(units[unit])" + (exact ? " (\(count) bytes)" : "")
    }

    /// A value for one table cell: strings and JSON on one line, control characters escaped.
    static func cell(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                out += "\\u{" + String(scalar.value, radix: 16) + "}"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// A commit's time in ISO 8601 with milliseconds, UTC; outside the calendar range (a
    /// forged record's), its seconds since 1970 with a note, as a date value is shown.
    static func timestamp(_ date: Date) -> String {
        guard StoredValue.calendarDates.contains(date.timeIntervalSince1970) else {
            return StoredValue.uncalendared(date)
        }
        return date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}
