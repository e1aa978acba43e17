//! The one table renderer of every command: aligned text (with or without
//! headings, or zramctl's `--raw`) laid out by `comfy-table`, and CSV with
//! raw numbers written by `csv`.

use std::fmt::Write;

/// How a table is printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// Leave out the heading row (`--noheadings`).
    pub no_headings: bool,
    /// Columns separated by one space, nothing aligned (`--raw`).
    pub raw: bool,
}

/// A table of strings: a header row, then rows; numbers right-aligned.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

/// A value that cannot be computed or was not measured: shown as this, `null` in JSON.
pub const MISSING: &str = "-";

fn looks_numeric(cell: &str) -> bool {
    cell.chars()
        .next()
        .is_some_and(|c| c.is_ascii_digit() || c == '-' || c == '+' || c == '.')
}

/// Columns are two spaces apart, as `ps` and zramctl lay them out.
const GAP: u16 = 2;

impl Table {
    /// A table with these column names; the first column is left-aligned.
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (as many cells as header columns).
    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len());
        self.rows.push(cells);
    }

    /// Aligned text with headings.
    pub fn render(&self) -> String {
        self.render_with(Style::default())
    }

    /// Text in `style`: labels left-aligned, numeric-looking cells right-aligned.
    pub fn render_with(&self, style: Style) -> String {
        let rows: Vec<&Vec<String>> = if style.no_headings {
            self.rows.iter().collect()
        } else {
            std::iter::once(&self.header).chain(&self.rows).collect()
        };
        let mut out = String::new();
        if style.raw {
            for row in rows {
                out.push_str(&row.join(" "));
                out.push('\n');
            }
            return out;
        }
        let mut table = comfy_table::Table::new();
        table.load_preset(comfy_table::presets::NOTHING);
        for row in rows {
            table.add_row(row.iter().enumerate().map(|(col, cell)| {
                let right = col > 0 && (looks_numeric(cell) || cell == MISSING);
                comfy_table::Cell::new(cell).set_alignment(if right {
                    comfy_table::CellAlignment::Right
                } else {
                    comfy_table::CellAlignment::Left
                })
            }));
        }
        for column in table.column_iter_mut() {
            column.set_padding((0, GAP));
        }
        for line in table.lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// RFC 4180 CSV with the header row.
    pub fn csv(&self) -> String {
        let mut writer = csv::Writer::from_writer(Vec::new());
        for row in std::iter::once(&self.header).chain(&self.rows) {
            // Writing to memory fails only on an allocation failure.
            writer.write_record(row).expect("CSV into memory");
        }
        let bytes = writer.into_inner().expect("CSV into memory");
        String::from_utf8(bytes).expect("CSV of UTF-8 cells is UTF-8")
    }
}

/// A table printed a row at a time, as a live view fills it: every column
/// as wide as its heading (at least `min_width`), cells right-aligned.
/// Written here: a table crate lays out whole tables, and each line of this
/// one is printed before the next row exists.
#[derive(Debug)]
pub struct LiveTable {
    header: Vec<String>,
    widths: Vec<usize>,
}

impl LiveTable {
    /// Columns named `header`, each at least `min_width` wide.
    pub fn new(header: &[&str], min_width: usize) -> Self {
        Self {
            header: header.iter().map(|h| h.to_string()).collect(),
            widths: header
                .iter()
                .map(|h| h.chars().count().max(min_width))
                .collect(),
        }
    }

    /// The heading line.
    pub fn header(&self) -> String {
        self.line(&self.header)
    }

    /// One row (as many cells as columns).
    pub fn line(&self, cells: &[String]) -> String {
        let mut out = String::new();
        for (cell, width) in cells.iter().zip(&self.widths) {
            let _ = write!(out, "{cell:>width$}  ");
        }
        out.trim_end().to_string()
    }
}

/// Bytes in zramctl's compact style: `0B`, `512K`, `1.5M`, `4G`.
pub fn compact_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "K", "M", "G", "T", "P"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    let rounded = (value * 10.0).round() / 10.0;
    if rounded.fract() == 0.0 {
        format!("{}{}", rounded as u64, UNITS[unit])
    } else {
        format!("{rounded:.1}{}", UNITS[unit])
    }
}

/// `numerator / denominator` as `2.57`, `-` when there is nothing to divide,
/// or `same-filled only` when data is stored without any compressed bytes.
pub fn ratio_text(numerator: u64, denominator: u64) -> String {
    match (numerator, denominator) {
        (0, _) => MISSING.to_string(),
        (_, 0) => "same-filled only".to_string(),
        (n, d) => format!("{:.2}", n as f64 / d as f64),
    }
}

/// A horizontal bar of `width` characters for `value` out of `max` (Unicode eighths).
pub fn bar(value: f64, max: f64, width: usize) -> String {
    if !(value.is_finite() && max.is_finite()) || max <= 0.0 || value <= 0.0 {
        return String::new();
    }
    const EIGHTHS: [&str; 8] = ["", "▏", "▎", "▍", "▌", "▋", "▊", "▉"];
    let eighths = ((value / max).min(1.0) * width as f64 * 8.0).round() as usize;
    let mut out = "█".repeat(eighths / 8);
    out.push_str(EIGHTHS[eighths % 8]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns_and_escapes_csv() {
        let mut table = Table::new(&["name", "value"]);
        table.row(vec!["a".into(), "1".into()]);
        table.row(vec!["long, name".into(), "12345".into()]);
        assert_eq!(
            table.render(),
            "name        value\na               1\nlong, name  12345\n"
        );
        assert_eq!(table.csv(), "name,value\na,1\n\"long, name\",12345\n");
        let style = Style {
            no_headings: true,
            raw: true,
        };
        assert_eq!(table.render_with(style), "a 1\nlong, name 12345\n");
    }

    #[test]
    fn live_rows_line_up_under_their_heading() {
        let live = LiveTable::new(&["time", "resident MiB"], 5);
        assert_eq!(live.header(), " time  resident MiB");
        assert_eq!(
            live.line(&["1s".into(), "12.5".into()]),
            "   1s          12.5"
        );
    }

    #[test]
    fn degenerate_values_say_what_they_are() {
        assert_eq!(ratio_text(0, 0), "-");
        assert_eq!(ratio_text(40960, 0), "same-filled only");
        assert_eq!(ratio_text(4096, 1024), "4.00");
        assert_eq!(compact_bytes(0), "0B");
        assert_eq!(compact_bytes(1536 << 10), "1.5M");
        assert_eq!(compact_bytes(4 << 30), "4G");
        assert_eq!(bar(1.0, 2.0, 4), "██");
        assert_eq!(bar(0.0, 2.0, 4), "");
        assert_eq!(bar(1.0, 8.0, 1), "▏");
    }
}
