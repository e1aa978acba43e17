//! `zpage bench` output for people: the tables (through the one table
//! renderer), fio-style latency distributions as terminal bars, and
//! `--report FILE.html`, a self-contained page whose script draws the plots
//! (throughput and latency per tier, latency CDFs) from the results.

use crate::table::{bar, Table};
use zpage_bench::report::{self, BenchResult, Rows};

fn table(rows: Rows) -> Table {
    let mut table = Table::new(&rows.header);
    for row in rows.rows {
        table.row(row);
    }
    table
}

/// The results table, zpage/kernel ratios and hot/cold fault shares.
pub fn tables_text(results: &[BenchResult]) -> String {
    let mut text = table(report::results_rows(results)).render();
    let ratios = report::ratios_rows(results, "zpage");
    if !ratios.rows.is_empty() {
        text.push_str("\nzpage / kernel (touches/s above 1x: zpage faster; latency below 1x: zpage shorter)\n");
        text.push_str(&table(ratios).render());
    }
    let backing = report::backing_rows(results);
    if !backing.rows.is_empty() {
        text.push_str("\ntier below RAM at the end of each phase (on disk: the file's allocated blocks, as du counts them; payload: the live pages' compressed bytes)\n");
        text.push_str(&table(backing).render());
    }
    let shares = report::fault_share_rows(results);
    if !shares.rows.is_empty() {
        text.push_str("\nhot/cold: share of touches that faulted\n");
        text.push_str(&table(shares).render());
    }
    text
}

fn band_label(upper_us: f64) -> String {
    if !upper_us.is_finite() {
        ">2 s".into()
    } else if upper_us >= 1000.0 {
        format!("<={} ms", upper_us / 1000.0)
    } else {
        format!("<={upper_us} µs")
    }
}

/// Each result's latency distribution in fio's bands, as bars.
pub fn latency_charts(results: &[BenchResult]) -> String {
    let mut out = String::new();
    for r in results.iter().filter(|r| !r.latency_bands.is_empty()) {
        out.push_str(&format!(
            "\n{} {} {}: touch latency ({} touches)\n",
            r.tier, r.workload, r.pattern, r.touches
        ));
        for &(upper, share) in &r.latency_bands {
            if share < 0.0001 {
                continue;
            }
            out.push_str(&format!(
                "  {:>10} {:>7.2}%  {}\n",
                band_label(upper),
                share * 100.0,
                bar(share, 1.0, 40)
            ));
        }
    }
    out
}

/// The HTML report: the results as JSON, drawn into SVG by the page's script.
pub fn html(results: &[BenchResult], title: &str) -> serde_json::Result<String> {
    // `</` cannot end the script element early once escaped.
    let data = serde_json::to_string(results)?.replace("</", "<\\/");
    let title = title
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    Ok(format!(
        r##"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
h2 {{ margin-top: 2em; }}
.zpage-plot {{ border: 1px solid #ddd; margin: 0.5em 0 1.5em; }}
.zpage-plot text {{ font-size: 11px; }}
table {{ border-collapse: collapse; font-size: 12px; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }}
</style>
</head>
<body>
<h1>{title}</h1>
<p>Throughput and touch latency of each tier on the same pages and access sequence; latency CDFs per phase.</p>
<div id="plots"></div>
<h2>All results</h2>
<table id="results"></table>
<script type="application/json" id="zpage-data">{data}</script>
<script>
"use strict";
const results = JSON.parse(document.getElementById("zpage-data").textContent);
const NS = "http://www.w3.org/2000/svg";
const colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
const tiers = [...new Set(results.map(r => r.tier))];
const color = t => colors[tiers.indexOf(t) % colors.length];
const phases = [...new Set(results.map(r => r.workload + " " + r.pattern))];
function el(name, attrs, parent, text) {{
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}}
function svg(kind, title, width, height) {{
  const h = document.createElement("h2");
  h.textContent = title;
  document.getElementById("plots").appendChild(h);
  const s = el("svg", {{class: "zpage-plot", "data-plot": kind, width, height, viewBox: `0 0 ${{width}} ${{height}}`}});
  document.getElementById("plots").appendChild(s);
  return s;
}}
function legend(s, x, y) {{
  tiers.forEach((t, i) => {{
    el("rect", {{x, y: y + i * 16, width: 10, height: 10, fill: color(t), class: "legend"}}, s);
    el("text", {{x: x + 14, y: y + i * 16 + 9}}, s, t);
  }});
}}
// Grouped bars: one group per phase, one bar per tier; log scale when asked.
function bars(kind, title, value, unit, log) {{
  const W = 900, H = 320, L = 70, B = 90, T = 20, R = 170;
  const s = svg(kind, title, W, H);
  const values = results.map(value).filter(v => v > 0);
  const max = Math.max(...values), min = Math.min(...values);
  const y = v => {{
    if (!(v > 0)) return H - B;
    const f = log ? (Math.log(v) - Math.log(min / 2)) / (Math.log(max * 1.1) - Math.log(min / 2)) : v / (max * 1.1);
    return H - B - f * (H - B - T);
  }};
  const gw = (W - L - R) / phases.length, bw = Math.max(2, (gw - 10) / tiers.length);
  phases.forEach((p, i) => {{
    tiers.forEach((t, j) => {{
      const r = results.find(r => r.tier === t && r.workload + " " + r.pattern === p);
      if (!r) return;
      const v = value(r);
      el("rect", {{x: L + i * gw + 5 + j * bw, y: y(v), width: bw - 1, height: H - B - y(v), fill: color(t), class: "bar"}}, s)
        .appendChild(el("title", {{}}, null, `${{t}} ${{p}}: ${{v.toPrecision(4)}} ${{unit}}`));
    }});
    el("text", {{x: L + i * gw + gw / 2, y: H - B + 12, "text-anchor": "end", transform: `rotate(-30 ${{L + i * gw + gw / 2}} ${{H - B + 12}})`}}, s, p);
  }});
  el("line", {{x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#000"}}, s);
  el("line", {{x1: L, y1: T, x2: L, y2: H - B, stroke: "#000"}}, s);
  el("text", {{x: 5, y: T + 10}}, s, unit + (log ? " (log)" : ""));
  el("text", {{x: L - 5, y: y(max) + 4, "text-anchor": "end"}}, s, max.toPrecision(3));
  legend(s, W - R + 10, T);
}}
bars("throughput", "Throughput per tier (touches/s)", r => r.touches_per_s, "touches/s", false);
bars("latency-p50", "Median touch latency per tier (µs)", r => r.p50_us, "µs", true);
bars("latency-p99", "p99 touch latency per tier (µs)", r => r.p99_us, "µs", true);
bars("latency-p999", "p99.9 touch latency per tier (µs)", r => r.p999_us, "µs", true);
// One CDF per phase: share of touches at or below a latency, one line per tier, log x.
phases.forEach(p => {{
  const rs = results.filter(r => r.workload + " " + r.pattern === p && r.latency_cdf.length > 0);
  if (rs.length === 0) return;
  const W = 900, H = 300, L = 60, B = 40, T = 20, R = 170;
  const s = svg("cdf", "Latency CDF: " + p, W, H);
  const xs = rs.flatMap(r => r.latency_cdf.map(c => c[0])).filter(x => x > 0);
  const lo = Math.log(Math.min(...xs)), hi = Math.log(Math.max(...xs) * 1.01);
  const x = v => L + (Math.log(Math.max(v, 1e-3)) - lo) / (hi - lo) * (W - L - R);
  const y = f => H - B - f * (H - B - T);
  rs.forEach(r => {{
    const d = r.latency_cdf.map((c, i) => (i ? "L" : "M") + x(c[0]).toFixed(1) + " " + y(c[1]).toFixed(1)).join(" ");
    el("path", {{d, fill: "none", stroke: color(r.tier), "stroke-width": 2, class: "cdf-line", "data-tier": r.tier}}, s);
  }});
  el("line", {{x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#000"}}, s);
  el("line", {{x1: L, y1: T, x2: L, y2: H - B, stroke: "#000"}}, s);
  for (let e = Math.ceil(lo / Math.LN10); e <= hi / Math.LN10; e++) {{
    el("text", {{x: x(Math.pow(10, e)), y: H - B + 14, "text-anchor": "middle"}}, s, Math.pow(10, e) + " µs");
  }}
  [0, 0.5, 0.9, 0.99, 1].forEach(f => el("text", {{x: L - 5, y: y(f) + 4, "text-anchor": "end"}}, s, f));
  legend(s, W - R + 10, T);
}});
// The table of every figure.
const columns = ["tier", "workload", "pattern", "touches", "touches_per_s", "p50_us", "p99_us", "p999_us", "max_us", "resident_max_bytes", "compressed_bytes", "fault_share"];
const table = document.getElementById("results");
const head = table.insertRow();
columns.forEach(c => {{ const th = document.createElement("th"); th.textContent = c; head.appendChild(th); }});
results.forEach(r => {{
  const row = table.insertRow();
  columns.forEach(c => {{ row.insertCell().textContent = typeof r[c] === "number" ? +r[c].toPrecision(4) : r[c]; }});
}});
</script>
</body>
</html>
"##
    ))
}
