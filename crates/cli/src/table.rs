//! Aligned text tables and CSV for the commands' reports.

use std::fmt::Write;

/// A table of strings: a header row, then rows; numbers right-aligned.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
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

    /// Aligned text: first column left-aligned, numeric-looking cells right-aligned.
    pub fn render(&self) -> String {
        let widths: Vec<usize> = (0..self.header.len())
            .map(|col| {
                std::iter::once(&self.header[col])
                    .chain(self.rows.iter().map(|row| &row[col]))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (col, cell) in row.iter().enumerate() {
                let numeric = col > 0
                    && cell
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_digit() || c == '-');
                if numeric {
                    let _ = write!(line, "{cell:>width$}  ", width = widths[col]);
                } else {
                    let _ = write!(line, "{cell:<width$}  ", width = widths[col]);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// RFC 4180 CSV with the header row.
    pub fn csv(&self) -> String {
        let escape = |cell: &String| {
            if cell.contains([',', '"', '\n']) {
                format!("\"{}\"", cell.replace('"', "\"\""))
            } else {
                cell.clone()
            }
        };
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            out.push_str(&row.iter().map(escape).collect::<Vec<_>>().join(","));
            out.push('\n');
        }
        out
    }
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
    }
}
