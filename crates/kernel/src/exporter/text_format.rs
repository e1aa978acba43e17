//! The Prometheus text exposition format (0.0.4): a parser into metric
//! families, used to validate and merge the per-process files, and a writer.
//!
//! Written here because the crates do not fit. `prometheus-client` encodes
//! OpenMetrics only: a counter's TYPE and HELP name the family without
//! `_total`, which the 0.0.4 parsers operators check with read as another,
//! untyped family (`promtool check metrics` of Debian 12's Prometheus 2.42:
//! "zpage_x_total no help text"; the Python client makes it `unknown`). The
//! `prometheus` crate writes 0.0.4 from protobuf `MetricFamily` messages,
//! into which every family (the per-process files' histograms included)
//! would have to be rebuilt sample by sample: more code than this writer,
//! and protobuf besides. `prometheus-parse` is lenient by design (lines its
//! regular expressions do not match are skipped, and a `}` inside a quoted
//! label value ends the labels), so it cannot tell a malformed file from a
//! good one, which is what the exporter needs of a parser; it is also
//! unmaintained since 2023. The output is checked by `promtool check
//! metrics` and the Python client's parser in `tests/exporter_http.rs`.

use std::fmt::Write as _;

/// One sample line: its full name (a histogram's `_bucket`, `_sum`, `_count`
/// included), its labels in order, and its value as written.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Sample name.
    pub name: String,
    /// Label pairs, unescaped.
    pub labels: LabelPairs,
    /// Value as written (`1`, `2.5e3`, `NaN`, `+Inf`).
    pub value: String,
}

impl Sample {
    /// The value of label `name`, if present.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A metric family: HELP, TYPE and its samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// Family name (the TYPE line's).
    pub name: String,
    /// HELP text, unescaped.
    pub help: Option<String>,
    /// `counter`, `gauge`, `histogram`, `summary` or `untyped`.
    pub kind: String,
    /// Samples in order.
    pub samples: Vec<Sample>,
}

const KINDS: [&str; 5] = ["counter", "gauge", "histogram", "summary", "untyped"];

fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The family a sample named `sample` belongs to, among `families`.
fn family_of<'a>(families: &'a mut [Family], sample: &str) -> Option<&'a mut Family> {
    let position = families.iter().position(|f| {
        f.name == sample
            || match f.kind.as_str() {
                "histogram" => ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|suffix| sample.strip_suffix(suffix) == Some(f.name.as_str())),
                "summary" => ["_sum", "_count"]
                    .iter()
                    .any(|suffix| sample.strip_suffix(suffix) == Some(f.name.as_str())),
                _ => false,
            }
    })?;
    families.get_mut(position)
}

fn unescape(text: &str, quotes: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('\\') => out.push('\\'),
            Some('"') if quotes => out.push('"'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// Label pairs of one sample, in order.
pub type LabelPairs = Vec<(String, String)>;

fn parse_labels(text: &str) -> Result<(LabelPairs, &str), String> {
    // `text` starts right after `{`; returns the labels and the rest after `}`.
    let mut labels = Vec::new();
    let mut rest = text.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = rest.find('=').ok_or("label without `=`")?;
        let name = rest[..eq].trim();
        if !valid_label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        let value_text = rest[eq + 1..]
            .trim_start()
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut end = None;
        let mut escaped = false;
        for (i, c) in value_text.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = Some(i);
                    break;
                }
                _ => escaped = false,
            }
        }
        let end = end.ok_or("unterminated label value")?;
        if labels.iter().any(|(k, _)| k == name) {
            return Err(format!("label {name:?} given twice"));
        }
        labels.push((name.to_string(), unescape(&value_text[..end], true)));
        rest = value_text[end + 1..].trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after.trim_start();
        } else if !rest.starts_with('}') {
            return Err("expected `,` or `}` after a label".into());
        }
    }
}

fn valid_value(value: &str) -> bool {
    matches!(value, "NaN" | "+Inf" | "-Inf" | "Inf") || value.parse::<f64>().is_ok()
}

/// Parses text-format metrics into families. Every sample must follow a
/// TYPE line of its family (as the files zpage reads are required to), each
/// family has one TYPE, and names, labels and values must be well formed.
pub fn parse(text: &str) -> Result<Vec<Family>, String> {
    let mut families: Vec<Family> = Vec::new();
    let mut helps: Vec<(String, String)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = |problem: &str| format!("line {}: {problem}: {line}", n + 1);
        let line_trimmed = line.trim();
        if line_trimmed.is_empty() {
            continue;
        }
        if let Some(comment) = line_trimmed.strip_prefix('#') {
            let mut words = comment.trim_start().splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("TYPE"), Some(name), Some(kind)) => {
                    let kind = kind.trim();
                    if !valid_metric_name(name) || !KINDS.contains(&kind) {
                        return Err(at("bad TYPE line"));
                    }
                    if families.iter().any(|f| f.name == name) {
                        return Err(at("second TYPE line for the same family"));
                    }
                    let help = helps
                        .iter()
                        .find(|(h, _)| h == name)
                        .map(|(_, text)| text.clone());
                    families.push(Family {
                        name: name.to_string(),
                        help,
                        kind: kind.to_string(),
                        samples: Vec::new(),
                    });
                }
                (Some("HELP"), Some(name), help) => {
                    if !valid_metric_name(name) {
                        return Err(at("bad HELP line"));
                    }
                    let help = unescape(help.unwrap_or(""), false);
                    match families.iter_mut().find(|f| f.name == name) {
                        Some(family) => family.help = Some(help),
                        None => helps.push((name.to_string(), help)),
                    }
                }
                _ => {}
            }
            continue;
        }
        let name_end = line_trimmed
            .find(|c: char| c == '{' || c.is_whitespace())
            .ok_or_else(|| at("sample without a value"))?;
        let name = &line_trimmed[..name_end];
        if !valid_metric_name(name) {
            return Err(at("bad metric name"));
        }
        let (labels, rest) = match line_trimmed[name_end..].strip_prefix('{') {
            Some(after) => parse_labels(after).map_err(|e| at(&e))?,
            None => (Vec::new(), &line_trimmed[name_end..]),
        };
        let mut fields = rest.split_whitespace();
        let value = fields.next().ok_or_else(|| at("sample without a value"))?;
        if !valid_value(value) {
            return Err(at("bad value"));
        }
        if let Some(timestamp) = fields.next() {
            if timestamp.parse::<i64>().is_err() {
                return Err(at("bad timestamp"));
            }
        }
        if fields.next().is_some() {
            return Err(at("text after the timestamp"));
        }
        let family =
            family_of(&mut families, name).ok_or_else(|| at("sample before its TYPE line"))?;
        family.samples.push(Sample {
            name: name.to_string(),
            labels,
            value: value.to_string(),
        });
    }
    Ok(families)
}

fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Escapes a label value for the text format.
pub fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Formats a value: integers without a decimal point, NaN and infinities by name.
pub fn format_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

/// Writes families as text: HELP, TYPE, then the samples of each.
pub fn write(families: &[Family]) -> String {
    let mut out = String::new();
    for family in families.iter().filter(|f| !f.samples.is_empty()) {
        if let Some(help) = &family.help {
            let _ = writeln!(out, "# HELP {} {}", family.name, escape_help(help));
        }
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
        for sample in &family.samples {
            out.push_str(&sample.name);
            if !sample.labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in sample.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{k}=\"{}\"", escape_label(v));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", sample.value);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_writes_back() {
        let text = "# HELP a_total Things.\n# TYPE a_total counter\na_total{x=\"1\",y=\"q\\\"uote\"} 3\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1.5\nh_count 2\n";
        let families = parse(text).unwrap();
        assert_eq!(families.len(), 2);
        assert_eq!(families[0].help.as_deref(), Some("Things."));
        assert_eq!(families[0].samples[0].label("y"), Some("q\"uote"));
        assert_eq!(families[1].samples.len(), 3);
        assert_eq!(write(&families), text);
    }

    #[test]
    fn rejects_broken_text() {
        for bad in [
            "a 1\n",
            "# TYPE a gauge\na{x=\"1} 1\n",
            "# TYPE a gauge\na one\n",
            "# TYPE 1a gauge\n",
            "# TYPE a gauge\n# TYPE a gauge\n",
            "# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n",
            "# TYPE a gauge\na 1 2 3\n",
            "# TYPE a flavour\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
