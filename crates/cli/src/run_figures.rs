//! The memory figures of `zpage run`, one definition for both modes, so a
//! user-mode summary and a kernel-mode one can be subtracted:
//!
//! - the **zpage peak**: the most memory the run under zpage held. User
//!   mode: `wait4`'s `ru_maxrss` of the program and its descendants (the
//!   compressed pool is memory of the process, so it is in it). Kernel
//!   mode: the memory cgroup's peak RAM plus the compressed store's peak
//!   (zram's `mem_used_max`), which live outside the process;
//! - the **plain peak**: with `--compare`, `wait4`'s `ru_maxrss` of the
//!   program and its descendants run once without zpage first;
//! - **saved** = plain peak - zpage peak (negative when zpage cost memory),
//!   or, without `--compare`, the mode's estimate of the plain peak less
//!   the zpage peak, labelled as an estimate with its method.

use zpage_units::format_bytes;

/// What `--compare`'s plain run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct PlainRun {
    /// `wait4`'s `ru_maxrss` of the program and its descendants (bytes).
    pub peak_bytes: u64,
    /// From spawning the program to reaping it (seconds).
    pub wall_seconds: f64,
    /// The shell's status: the exit code, or 128 + the signal.
    pub exit_status: i32,
}

/// An estimate of the program's peak without zpage and how it was made.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub peak_bytes: u64,
    /// A few words, after "estimated: ".
    pub method: &'static str,
}

/// The figures, as both summaries carry them (flattened into their JSON).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct MemoryFigures {
    /// The most memory the run under zpage held (bytes; see `zpage_peak_method`).
    pub zpage_peak_bytes: u64,
    /// How `zpage_peak_bytes` is measured in this mode.
    pub zpage_peak_method: &'static str,
    /// `--compare`'s plain run: its peak (bytes), wall time and exit status.
    pub plain_peak_bytes: Option<u64>,
    pub plain_wall_seconds: Option<f64>,
    pub plain_exit_status: Option<i32>,
    /// The peak `saved_bytes` is counted from: `plain_peak_bytes`, or the
    /// mode's estimate of it (bytes).
    pub baseline_peak_bytes: Option<u64>,
    /// `baseline_peak_bytes - zpage_peak_bytes` (negative when the run
    /// under zpage held more); absent when there is nothing to count from,
    /// or the run under zpage was cut short.
    pub saved_bytes: Option<i64>,
    /// "measured" (against a plain run), "estimated: HOW", or "none: WHY".
    pub saved_method: String,
    /// What a reader of these figures must know: the run under zpage was
    /// OOM-killed, the two runs ended differently.
    pub notes: Vec<String>,
    /// The run under zpage's wall time; both summaries already have it as
    /// `wall_seconds`.
    #[serde(skip)]
    pub zpage_wall_seconds: f64,
    /// How the baseline was had ("measured: a plain run first", "estimated: ...").
    #[serde(skip)]
    baseline_label: String,
}

/// The run under zpage, as the figures need it.
#[derive(Debug, Clone, PartialEq)]
pub struct ZpageRun {
    pub peak_bytes: u64,
    pub peak_method: &'static str,
    pub wall_seconds: f64,
    pub exit_status: i32,
    /// Why the run is no measure of the program's peak (it was OOM-killed
    /// before it finished), if it is not.
    pub cut_short: Option<String>,
}

impl MemoryFigures {
    /// The figures of `run`, against `plain` when there was a plain run,
    /// else against `estimate` (when the mode has one).
    pub fn new(
        run: ZpageRun,
        plain: Option<&PlainRun>,
        estimate: Option<Estimate>,
    ) -> MemoryFigures {
        let mut notes = Vec::new();
        let (baseline, mut method) = match (plain, &estimate) {
            (Some(plain), _) => (Some(plain.peak_bytes), "measured".to_string()),
            (None, Some(e)) if e.peak_bytes > 0 => {
                (Some(e.peak_bytes), format!("estimated: {}", e.method))
            }
            (None, _) => (
                None,
                "none: no plain run (--compare) and no estimate from this run".to_string(),
            ),
        };
        let baseline_label = match plain {
            Some(_) => "measured: a plain run first".to_string(),
            None => method.clone(),
        };
        let mut saved = baseline.map(|b| signed(b) - signed(run.peak_bytes));
        if let Some(why) = &run.cut_short {
            notes.push(format!("the run under zpage {why}"));
            saved = None;
            method = format!("none: the run under zpage {why}, so its peak is not the program's");
        }
        if let Some(plain) = plain {
            if plain.exit_status != run.exit_status {
                notes.push(format!(
                    "the plain run ended with status {} and the run under zpage with {}: they may not have done the same work",
                    plain.exit_status, run.exit_status
                ));
            }
        }
        MemoryFigures {
            zpage_peak_bytes: run.peak_bytes,
            zpage_peak_method: run.peak_method,
            plain_peak_bytes: plain.map(|p| p.peak_bytes),
            plain_wall_seconds: plain.map(|p| p.wall_seconds),
            plain_exit_status: plain.map(|p| p.exit_status),
            baseline_peak_bytes: baseline,
            saved_bytes: saved,
            saved_method: method,
            notes,
            zpage_wall_seconds: run.wall_seconds,
            baseline_label,
        }
    }

    /// The summary's lines for these figures, in `/usr/bin/time -v`'s layout.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "\tPeak under zpage ({}): {}",
            self.zpage_peak_method,
            format_bytes(self.zpage_peak_bytes)
        )];
        if let Some(baseline) = self.baseline_peak_bytes {
            lines.push(format!(
                "\tProgram's own peak without zpage ({}): {}",
                self.baseline_label,
                format_bytes(baseline)
            ));
        }
        lines.push(match (self.saved_bytes, self.baseline_peak_bytes) {
            (Some(saved), Some(baseline)) if baseline > 0 => format!(
                "\tMemory saved ({}): {} ({:.1}% of that peak)",
                self.saved_method,
                signed_bytes(saved),
                saved as f64 * 100.0 / baseline as f64
            ),
            (Some(saved), _) => format!(
                "\tMemory saved ({}): {}",
                self.saved_method,
                signed_bytes(saved)
            ),
            (None, _) => format!("\tMemory saved: unknown ({})", self.saved_method),
        });
        if let Some(plain_wall) = self.plain_wall_seconds {
            let ratio = if plain_wall > 0.0 {
                format!(" ({:.2}x)", self.zpage_wall_seconds / plain_wall)
            } else {
                String::new()
            };
            lines.push(format!(
                "\tWall time plain / under zpage: {plain_wall:.2} s / {:.2} s{ratio}",
                self.zpage_wall_seconds
            ));
        }
        lines.extend(self.notes.iter().map(|n| format!("\tNote: {n}")));
        lines
    }
}

fn signed(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// `-12.0 MiB` for a negative figure, never clamped to 0.
pub fn signed_bytes(bytes: i64) -> String {
    if bytes < 0 {
        format!("-{}", format_bytes(bytes.unsigned_abs()))
    } else {
        format_bytes(bytes.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(peak: u64) -> ZpageRun {
        ZpageRun {
            peak_bytes: peak,
            peak_method: "test",
            wall_seconds: 2.0,
            exit_status: 0,
            cut_short: None,
        }
    }

    const ESTIMATE: Estimate = Estimate {
        peak_bytes: 900 << 20,
        method: "a guess",
    };

    #[test]
    fn saved_is_the_plain_peak_less_the_zpage_peak_whatever_the_estimate() {
        let plain = PlainRun {
            peak_bytes: 1000 << 20,
            wall_seconds: 1.0,
            exit_status: 0,
        };
        let f = MemoryFigures::new(run(300 << 20), Some(&plain), Some(ESTIMATE));
        assert_eq!(f.saved_bytes, Some(700 << 20));
        assert_eq!(f.saved_method, "measured");
        assert_eq!(f.baseline_peak_bytes, Some(1000 << 20));
        let text = f.lines().join("\n");
        assert!(text.contains("Memory saved (measured): 700"), "{text}");
        assert!(text.contains("(70.0% of that peak)"), "{text}");
        assert!(text.contains("(2.00x)"), "{text}");
        assert!(f.notes.is_empty());
    }

    #[test]
    fn more_memory_under_zpage_is_a_negative_saving() {
        let plain = PlainRun {
            peak_bytes: 10 << 20,
            wall_seconds: 0.0,
            exit_status: 0,
        };
        let f = MemoryFigures::new(run(22 << 20), Some(&plain), None);
        assert_eq!(f.saved_bytes, Some(-(12 << 20)));
        let text = f.lines().join("\n");
        assert!(text.contains(": -12"), "{text}");
        // No ratio of a zero wall time.
        assert!(!text.contains("x)"), "{text}");
    }

    #[test]
    fn without_a_plain_run_the_saving_is_an_estimate_or_unknown() {
        let f = MemoryFigures::new(run(300 << 20), None, Some(ESTIMATE));
        assert_eq!(f.saved_bytes, Some(600 << 20));
        assert_eq!(f.saved_method, "estimated: a guess");
        assert!(f.lines().join("\n").contains("(estimated: a guess)"));

        let zero = Estimate {
            peak_bytes: 0,
            method: "nothing sampled",
        };
        for estimate in [None, Some(zero)] {
            let f = MemoryFigures::new(run(300 << 20), None, estimate);
            assert_eq!(f.saved_bytes, None);
            assert!(f.saved_method.starts_with("none:"), "{}", f.saved_method);
            assert!(f.lines().join("\n").contains("Memory saved: unknown"));
        }
    }

    #[test]
    fn a_run_cut_short_saves_nothing_measurable_and_says_why() {
        let plain = PlainRun {
            peak_bytes: 1000 << 20,
            wall_seconds: 1.0,
            exit_status: 0,
        };
        let mut cut = run(200 << 20);
        cut.exit_status = 137;
        cut.cut_short = Some("was OOM-killed".into());
        let f = MemoryFigures::new(cut, Some(&plain), None);
        assert_eq!(f.saved_bytes, None);
        assert!(f.saved_method.contains("OOM-killed"), "{}", f.saved_method);
        let text = f.lines().join("\n");
        assert!(
            text.contains("Note: the run under zpage was OOM-killed"),
            "{text}"
        );
        assert!(
            text.contains("status 0 and the run under zpage with 137"),
            "{text}"
        );
    }
}
