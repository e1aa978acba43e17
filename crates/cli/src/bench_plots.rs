//! The plots of `zpage bench --report`, drawn into SVG by `plotters`: axes
//! with several labelled ticks placed where they cannot overlap, the unit
//! beside the axis, a legend per plot. Drawn here rather than by a script in
//! the page, so the report reads the same in any browser or viewer, with
//! scripts off, and a test can check every label.

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;
use zpage_bench::report::BenchResult;

const WIDTH: u32 = 900;
const HEIGHT: u32 = 340;
const FONT: &str = "sans-serif";
/// The tiers' colours, in order of first appearance (matplotlib's).
const COLORS: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
];

type PlotResult<T> = Result<T, String>;

fn failed(e: impl std::fmt::Display) -> String {
    format!("drawing a plot failed: {e}")
}

/// `1234567` as `1,234,567`: every digit of an exact figure, grouped.
pub fn grouped(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A measured figure with `decimals` places, its integer part grouped.
pub fn grouped_f64(value: f64, decimals: usize) -> String {
    if !value.is_finite() {
        return "-".into();
    }
    let text = format!("{:.*}", decimals, value.abs());
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let mut out = if value < 0.0 {
        "-".to_string()
    } else {
        String::new()
    };
    out.push_str(&grouped(whole.parse().unwrap_or(0)));
    if !fraction.is_empty() {
        out.push('.');
        out.push_str(fraction);
    }
    out
}

/// A latency in µs as an axis label: `500 µs`, `2 ms`, `1.5 s`.
fn latency_label(us: f64) -> String {
    let trim = |v: f64| {
        let text = format!("{v:.3}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    if us >= 1e6 {
        format!("{} s", trim(us / 1e6))
    } else if us >= 1e3 {
        format!("{} ms", trim(us / 1e3))
    } else {
        format!("{} µs", trim(us))
    }
}

/// Ticks on a log axis from `low` to `high`: 1-2-5 per decade while that
/// gives at most ten, else each decade. When fewer than three fall inside
/// the range (data within one decade, say 300 µs to 900 µs), those of the
/// whole decades around it, from `10^floor` to `10^ceil`: the axis widens
/// to them (a p99.9 plot in CI once had only its two decade ends).
fn log_ticks(low: f64, high: f64) -> Vec<f64> {
    let first = low.log10().floor() as i32;
    let last = (high.log10().ceil() as i32).max(first + 1);
    let steps: &[f64] = if last - first <= 3 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let all: Vec<f64> = (first..=last)
        .flat_map(|e| steps.iter().map(move |s| s * 10f64.powi(e)))
        .filter(|t| *t <= 10f64.powi(last) * 1.001)
        .collect();
    let inside: Vec<f64> = all
        .iter()
        .copied()
        .filter(|t| *t >= low * 0.999 && *t <= high * 1.001)
        .collect();
    if inside.len() >= 3 {
        inside
    } else {
        all
    }
}

/// Each tier's colour, fixed for the whole report: tiers in order of first
/// appearance in the results.
#[derive(Clone, Debug)]
pub struct Palette(Vec<(String, RGBColor)>);

impl Palette {
    /// The palette of the tiers in `results`.
    pub fn new<'a>(results: impl IntoIterator<Item = &'a BenchResult>) -> Palette {
        let mut tiers: Vec<(String, RGBColor)> = Vec::new();
        for r in results {
            if !tiers.iter().any(|(t, _)| *t == r.tier) {
                let color = COLORS[tiers.len() % COLORS.len()];
                tiers.push((r.tier.clone(), color));
            }
        }
        Palette(tiers)
    }

    /// The tiers of `results` in palette order, with their colours.
    fn tiers_of(&self, results: &[&BenchResult]) -> Vec<(String, RGBColor)> {
        self.0
            .iter()
            .filter(|(t, _)| results.iter().any(|r| &r.tier == t))
            .cloned()
            .collect()
    }

    /// The tiers of `results` with their CSS colours, for the legend the
    /// page shows under each plot (an SVG legend would be clipped to the
    /// plotting area or cover its data).
    pub fn legend(&self, results: &[&BenchResult]) -> Vec<(String, String)> {
        self.tiers_of(results)
            .into_iter()
            .map(|(t, c)| (t, format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)))
            .collect()
    }
}

fn phases(results: &[&BenchResult]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in results {
        if !names.contains(&r.pattern) {
            names.push(r.pattern.clone());
        }
    }
    names
}

/// An axis whose ticks are exactly the ones given, linear or logarithmic:
/// the plot decides where labels go, so they are spaced to be read.
#[derive(Clone)]
struct Axis {
    low: f64,
    high: f64,
    log: bool,
    ticks: Vec<f64>,
}

impl Axis {
    fn position(&self, value: f64) -> f64 {
        if self.log {
            value.max(f64::MIN_POSITIVE).log10()
        } else {
            value
        }
    }

    /// A log axis over `low..high`, widened to whole ticks.
    fn log(low: f64, high: f64) -> Axis {
        let ticks = log_ticks(low, high);
        Axis {
            low: ticks.first().map_or(low, |t| t.min(low)),
            high: ticks.last().map_or(high, |t| t.max(high)),
            log: true,
            ticks,
        }
    }
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let (low, high) = (self.position(self.low), self.position(self.high));
        let share = (self.position(*value) - low) / (high - low);
        limit.0 + (share * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.low..self.high
    }
}

/// Ticks from 0 to `max` or just past it at a 1-2-5 step, four to eight of them.
fn linear_ticks(max: f64) -> Vec<f64> {
    let decade = 10f64.powf((max / 5.0).log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * decade)
        .find(|step| max / step <= 7.0)
        .unwrap_or(10.0 * decade);
    (0..)
        .map(|i| i as f64 * step)
        .take_while(|t| *t < max + step)
        .collect()
}

/// The smallest and largest of the finite, positive `values` (what a plot
/// can show), or `None` when there is none.
fn positive_extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold(None, |extent, v| match extent {
            None => Some((v, v)),
            Some((low, high)) => Some((f64::min(low, v), f64::max(high, v))),
        })
}

/// Room right of the plot (half the last tick label).
const RIGHT_MARGIN: u32 = 30;

/// What a tick's value reads as.
type TickLabel<'f> = &'f dyn Fn(&f64) -> String;

/// A chart with the report's look: caption, margins, label areas, fonts,
/// tick labels from `x_label` and `y_label`, axis descriptions.
fn chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    title: &str,
    (x, y): (Axis, Axis),
    (x_label, y_label): (TickLabel<'_>, TickLabel<'_>),
    (x_desc, y_desc): (Option<&str>, &str),
    x_mesh: bool,
) -> PlotResult<ChartContext<'a, SVGBackend<'b>, Cartesian2d<Axis, Axis>>> {
    root.fill(&WHITE).map_err(failed)?;
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 18))
        .margin(12)
        .margin_right(RIGHT_MARGIN)
        .x_label_area_size(if x_desc.is_some() { 44 } else { 32 })
        .y_label_area_size(100)
        .build_cartesian_2d(x, y)
        .map_err(failed)?;
    let mut mesh = chart.configure_mesh();
    if !x_mesh {
        mesh.disable_x_mesh();
    }
    if let Some(desc) = x_desc {
        mesh.x_desc(desc);
    }
    mesh.x_label_formatter(x_label)
        .y_label_formatter(y_label)
        .y_desc(y_desc)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(failed)?;
    Ok(chart)
}

/// One figure of every tier on every phase of one workload, as grouped bars.
pub struct BarPlot<'a> {
    /// The plot's heading.
    pub title: &'a str,
    /// What the bars measure, with its unit (the y axis's description).
    pub unit: &'a str,
    /// The figure of one result.
    pub value: fn(&BenchResult) -> f64,
    /// A log y axis, labelled as latencies (they span decades).
    pub log: bool,
}

impl BarPlot<'_> {
    /// The SVG of the bars of `results` (one workload's); empty when no
    /// result has the figure.
    pub fn svg(&self, results: &[&BenchResult], palette: &Palette) -> PlotResult<String> {
        let Some((min, max)) = positive_extent(results.iter().map(|r| (self.value)(r))) else {
            return Ok(String::new());
        };
        let phases = phases(results);
        let x = Axis {
            low: 0.0,
            high: phases.len() as f64,
            log: false,
            ticks: (0..phases.len()).map(|i| i as f64 + 0.5).collect(),
        };
        let y = if self.log {
            Axis::log(min / 2.0, max * 2.0)
        } else {
            let ticks = linear_ticks(max);
            Axis {
                low: 0.0,
                high: ticks.last().copied().unwrap_or(max),
                log: false,
                ticks,
            }
        };
        let floor = y.low;
        let log = self.log;
        let y_label = move |v: &f64| {
            if log {
                latency_label(*v)
            } else if v.fract() == 0.0 {
                grouped(*v as u64)
            } else {
                grouped_f64(*v, 2)
            }
        };
        let x_label = |v: &f64| phases.get(*v as usize).cloned().unwrap_or_default();
        let tiers = palette.tiers_of(results);
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
            let mut chart = chart(
                &root,
                self.title,
                (x, y),
                (&x_label, &y_label),
                (None, self.unit),
                false,
            )?;
            let width = 0.8 / tiers.len() as f64;
            for (t, (tier, color)) in tiers.iter().enumerate() {
                let bars = phases.iter().enumerate().filter_map(|(p, phase)| {
                    let r = results
                        .iter()
                        .find(|r| &r.tier == tier && &r.pattern == phase)?;
                    let left = p as f64 + 0.1 + t as f64 * width;
                    Some(Rectangle::new(
                        [
                            (left, floor),
                            (left + width * 0.9, (self.value)(r).max(floor)),
                        ],
                        color.filled(),
                    ))
                });
                chart.draw_series(bars).map_err(failed)?;
            }
            root.present().map_err(failed)?;
        }
        Ok(svg)
    }
}

/// The largest share of touches a CDF plot resolves: 1 - 10^-NINES.
const MAX_NINES: f64 = 4.0;

/// `share` (0-1) on the CDF's y axis: the number of nines of `share`, so
/// 0.9, 0.99 and 0.999 are equally far apart and the tail is readable.
fn nines(share: f64) -> f64 {
    (-(1.0 - share).max(10f64.powf(-MAX_NINES)).log10()).clamp(0.0, MAX_NINES)
}

/// A y tick of the CDF (a number of nines) as the share it stands for.
fn share_label(nines: &f64) -> String {
    if *nines == 0.0 {
        "0".to_string()
    } else {
        format!("{:.*}", *nines as usize, 1.0 - 10f64.powf(-nines))
    }
}

/// The latency CDF of every tier on one phase of one workload: latency on a
/// log x axis, the share of touches at or below it on a y axis of nines.
pub fn cdf_svg(title: &str, results: &[&BenchResult], palette: &Palette) -> PlotResult<String> {
    let latencies = results
        .iter()
        .flat_map(|r| r.latency_cdf.iter().map(|c| c.0));
    let Some((low, high)) = positive_extent(latencies) else {
        return Ok(String::new());
    };
    let x = Axis::log(low / 1.5, high * 1.5);
    let (low, high) = (x.low, x.high);
    let y = Axis {
        low: 0.0,
        high: MAX_NINES,
        log: false,
        ticks: (0..=MAX_NINES as usize).map(|n| n as f64).collect(),
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        let mut chart = chart(
            &root,
            title,
            (x, y),
            (&|v| latency_label(*v), &share_label),
            (
                Some("touch latency (log scale)"),
                "share of touches at or below",
            ),
            true,
        )?;
        for (tier, color) in palette.tiers_of(results) {
            for r in results.iter().filter(|r| r.tier == tier) {
                let line = r
                    .latency_cdf
                    .iter()
                    .filter(|c| c.0 > 0.0)
                    .map(|&(us, share)| (us.clamp(low, high), nines(share)));
                chart
                    .draw_series(LineSeries::new(line, color.stroke_width(2)))
                    .map_err(failed)?;
            }
        }
        root.present().map_err(failed)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_figures_are_grouped_not_rounded() {
        assert_eq!(grouped(65_536), "65,536");
        assert_eq!(grouped(67_108_864), "67,108,864");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped_f64(1_234_567.891, 1), "1,234,567.9");
        assert_eq!(grouped_f64(12.5, 2), "12.50");
    }

    #[test]
    fn ticks_and_labels() {
        assert_eq!(
            log_ticks(1.0, 100.0),
            [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        );
        assert_eq!(log_ticks(0.5, 2e6), [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]);
        // Within one decade: the decade's 1-2-5 ticks, the axis widened.
        assert_eq!(log_ticks(300.0, 900.0), [100.0, 200.0, 500.0, 1000.0]);
        assert_eq!(log_ticks(100.0, 100.0), [100.0, 200.0, 500.0, 1000.0]);
        assert_eq!(latency_label(2.0), "2 µs");
        assert_eq!(latency_label(1500.0), "1.5 ms");
        assert_eq!(latency_label(2e6), "2 s");
        assert_eq!(nines(0.0), 0.0);
        assert!((nines(0.99) - 2.0).abs() < 1e-9);
        assert_eq!(nines(1.0), MAX_NINES);
        assert_eq!(share_label(&2.0), "0.99");
        assert_eq!(share_label(&3.0), "0.999");
        assert_eq!(linear_ticks(91_000.0), [0.0, 20e3, 40e3, 60e3, 80e3, 100e3]);
        assert_eq!(linear_ticks(7.0), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
        assert_eq!(linear_ticks(7.5), [0.0, 2.0, 4.0, 6.0, 8.0]);
    }
}
