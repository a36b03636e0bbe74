import Foundation

/// Everything a run produced; what `--json` writes.
struct Report: Encodable {
    var header: RunHeader
    var rows: [Row]
    var ratios: [Ratio]
    var notYetAvailable: [String]
    var failures: [String]

    /// One table row.
    struct Row: Encodable {
        var name: String
        var p50Nanoseconds: Double?
        var p90Nanoseconds: Double?
        var p99Nanoseconds: Double?
        var operationsPerSecond: Double?
        var samples: Int?
        var value: Double?
        var unit: String?
        var note: String?

        init(_ measurement: Measurement) {
            name = measurement.name
            p50Nanoseconds = measurement.summary?.p50
            p90Nanoseconds = measurement.summary?.p90
            p99Nanoseconds = measurement.summary?.p99
            operationsPerSecond = measurement.operationsPerSecond ?? measurement.summary?.operationsPerSecond
            samples = measurement.summary?.count
            value = measurement.value
            unit = measurement.unit
            note = measurement.note
        }
    }
}

/// Pads `text` on the right (or the left, for numbers) to `width` characters.
private func pad(_ text: String, _ width: Int, right: Bool = false) -> String {
    let padding = String(repeating: " ", count: max(0, width - text.count))
    return right ? padding + text : text + padding
}

/// One line of the table for a measurement.
func tableLine(_ row: Report.Row) -> String {
    let nameWidth = 52
    if let value = row.value {
        let text =
            switch row.unit {
            case "x": format(value, decimals: 2) + "×"
            case "%": format(value, decimals: 3) + " %"
            default: format(value, decimals: 0) + " " + (row.unit ?? "")
            }
        return pad(row.name, nameWidth) + pad(text, 12, right: true)
    }
    let columns = [row.p50Nanoseconds, row.p90Nanoseconds, row.p99Nanoseconds].map {
        pad(formatDuration($0 ?? .nan), 12, right: true)
    }
    let throughput = row.operationsPerSecond.map { format($0, decimals: $0 < 100 ? 1 : 0) } ?? "-"
    return pad(row.name, nameWidth) + columns.joined() + pad(throughput, 14, right: true)
}

/// The table's heading line.
let tableHeading =
    pad("case", 52) + ["p50", "p90", "p99"].map { pad($0, 12, right: true) }.joined()
    + pad("ops/s", 14, right: true)

/// The ratios section as lines.
func ratioLines(_ ratios: [Ratio]) -> [String] {
    ratios.map { ratio in
        "[\(ratio.verdict)] \(ratio.name): \(ratio.measured)"
            + (ratio.target == "none" ? "" : " — target \(ratio.target)")
    }
}

/// Writes the report as pretty-printed JSON.
func writeJSON(_ report: Report, to path: String) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    try encoder.encode(report).write(to: URL(fileURLWithPath: path))
}

/// Writes a horizontal bar chart of every row's p50, on a log scale, as SVG.
func writeSVG(_ report: Report, to path: String) throws {
    let rows = report.rows.filter { ($0.p50Nanoseconds ?? 0) > 0 }
    let rowHeight = 18
    let labelWidth = 330
    let barWidth = 520.0
    let top = 48
    let height = top + rows.count * rowHeight + 40
    let values = rows.compactMap { $0.p50Nanoseconds }
    let low = floor(log10(max(values.min() ?? 1, 1)))
    let high = ceil(log10(max(values.max() ?? 10, 10)))
    let span = max(high - low, 1)
    func x(_ nanoseconds: Double) -> Double { Double(labelWidth) + (log10(nanoseconds) - low) / span * barWidth }
    func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
    }
    var svg = """
        <svg xmlns="http://www.w3.org/2000/svg" width="\(labelWidth + Int(barWidth) + 110)" height="\(height)" \
        font-family="monospace" font-size="11">
        <rect width="100%" height="100%" fill="white"/>
        <text x="8" y="16" font-size="13">pdbench p50 per operation (log scale) — \(escape(report.header.date))</text>
        <text x="8" y="32">\(escape(report.header.machine)), \(report.header.cores) cores, LMDB \
        \(escape(report.header.lmdbVersion)), \(escape(report.header.mode))</text>

        """
    var decade = low
    while decade <= high {
        let position = x(pow(10, decade))
        svg += "<line x1=\"\(position)\" y1=\"\(top - 4)\" x2=\"\(position)\" y2=\"\(height - 30)\" stroke=\"#ddd\"/>\n"
        svg +=
            "<text x=\"\(position)\" y=\"\(height - 16)\" text-anchor=\"middle\">"
            + "\(escape(formatDuration(pow(10, decade))))</text>\n"
        decade += 1
    }
    for (index, row) in rows.enumerated() {
        let p50 = row.p50Nanoseconds ?? 1
        let y = top + index * rowHeight
        let color =
            row.name.contains("/store") ? "#2b6cb0" : row.name.contains("raw-lmdb") ? "#718096" : "#dd8452"
        let end = max(x(p50), Double(labelWidth) + 1)
        svg += "<text x=\"\(labelWidth - 6)\" y=\"\(y + 12)\" text-anchor=\"end\">\(escape(row.name))</text>\n"
        svg +=
            "<rect x=\"\(labelWidth)\" y=\"\(y + 3)\" width=\"\(end - Double(labelWidth))\" height=\"12\" "
            + "fill=\"\(color)\"/>\n"
        svg += "<text x=\"\(end + 4)\" y=\"\(y + 12)\">\(escape(formatDuration(p50)))</text>\n"
    }
    svg += "</svg>\n"
    try svg.write(toFile: path, atomically: true, encoding: .utf8)
}
