//! Progress bars for long phases (fill, touches), on stderr; hidden when
//! stderr is not a terminal.

use indicatif::{ProgressBar, ProgressStyle};
use zpage_bench::Observer;

/// Shows one bar per phase, labelled with the tier and workload.
#[derive(Debug)]
pub struct BarObserver {
    label: String,
    bar: Option<ProgressBar>,
}

impl BarObserver {
    /// Bars labelled e.g. "zram-lz4 replay".
    pub fn new(label: String) -> Self {
        BarObserver { label, bar: None }
    }
}

impl Observer for BarObserver {
    fn phase_started(&mut self, phase: &str, total: u64) {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>28} {msg:<26} [{bar:30}] {percent:>3}% {per_sec:>14} eta {eta}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar.set_prefix(self.label.clone());
        bar.set_message(phase.to_string());
        self.bar = Some(bar);
    }

    fn progress(&mut self, done: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
        }
    }

    fn phase_finished(&mut self, _phase: &str) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
