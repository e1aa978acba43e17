//! `zpage exporter`: Prometheus metrics of zram, zswap, swap areas, the
//! sysctls that steer them, per-cgroup zswap use, and the zpage regions of
//! running programs, served over HTTP by one thread for every connection
//! (an idle or slow client never delays another's scrape, and what clients
//! can make it hold is bounded: [`server`]).

pub mod metrics;
pub mod process_metrics;
pub mod server;
pub mod text_format;

pub use server::Exporter;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use text_format::Family;

use crate::status;

/// Default listen address: loopback only (metrics reveal memory use).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9586";
/// Content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Where a scrape error happened (the `source` label of
/// `zpage_exporter_scrape_errors_total`).
pub const ERROR_SOURCES: [&str; 3] = ["zram", "zswap", "process_metrics"];

/// What every scrape reads, and the error counts kept between scrapes.
#[derive(Debug)]
pub struct Scraper {
    process_metrics_dir: Option<PathBuf>,
    sources: status::Sources,
    errors: Mutex<BTreeMap<&'static str, u64>>,
    /// The files left out of the last scrape and why, so each is logged
    /// once when it is first left out (or for another reason), not per scrape.
    left_out: Mutex<BTreeMap<PathBuf, process_metrics::Skipped>>,
}

impl Scraper {
    /// A scraper reading the per-process files in `process_metrics_dir`
    /// (see [`process_metrics`]); `None` leaves them out.
    pub fn new(process_metrics_dir: Option<PathBuf>) -> Scraper {
        Scraper {
            process_metrics_dir,
            sources: status::Sources::default(),
            errors: Mutex::new(ERROR_SOURCES.iter().map(|s| (*s, 0)).collect()),
            left_out: Mutex::new(BTreeMap::new()),
        }
    }

    /// Reads from `sources` instead of the running kernel's files (files
    /// standing in for features this kernel lacks, in tests).
    pub fn with_sources(mut self, sources: status::Sources) -> Scraper {
        self.sources = sources;
        self
    }

    /// Says on stderr (the journal, under systemd) which files a scrape
    /// leaves out and why, once per file and reason.
    fn log_left_out(&self, found: &process_metrics::ProcessMetrics) {
        let mut left_out = self.left_out.lock().unwrap_or_else(|e| e.into_inner());
        let mut now = BTreeMap::new();
        for (path, reason, why) in &found.skipped {
            if left_out.get(path) != Some(reason) {
                eprintln!(
                    "zpage exporter: leaving out {} ({}): {why}",
                    path.display(),
                    reason.label()
                );
            }
            now.insert(path.clone(), *reason);
        }
        *left_out = now;
    }

    /// One scrape: collects the kernel's state and the process files now and
    /// renders them. Never fails as a whole: what cannot be read is skipped
    /// and counted in `zpage_exporter_scrape_errors_total`.
    pub fn scrape(&self) -> String {
        let status = status::collect_from(&self.sources);
        let mut families = metrics::families(&status);
        let mut new_errors: Vec<&'static str> = Vec::new();
        new_errors.extend(
            status
                .zram
                .iter()
                .filter(|z| !z.errors.is_empty())
                .map(|_| "zram"),
        );
        if status.zswap.parameters_error.is_some()
            && std::path::Path::new(crate::zswap::PARAMS_DIR).exists()
        {
            new_errors.push("zswap");
        }
        let mut process_files = None;
        if let Some(dir) = &self.process_metrics_dir {
            let found = process_metrics::read_dir(dir);
            // Files that break the contract are errors; those of processes
            // that stopped or are gone are states, with their own alert.
            new_errors.extend(
                found
                    .skipped
                    .iter()
                    .filter(|(_, reason, _)| *reason == process_metrics::Skipped::Rejected)
                    .map(|_| "process_metrics"),
            );
            self.log_left_out(&found);
            process_files = Some(found);
        }
        let errors = {
            let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
            for source in new_errors {
                *errors.entry(source).or_insert(0) += 1;
            }
            errors.clone()
        };
        families.extend(self_families(&errors, process_files.as_ref()));
        if let Some(found) = process_files {
            families.extend(found.families);
        }
        text_format::write(&families)
    }
}

fn family(name: &str, kind: &str, help: &str, samples: Vec<(Vec<(&str, String)>, f64)>) -> Family {
    Family {
        name: name.to_string(),
        help: Some(help.to_string()),
        kind: kind.to_string(),
        samples: samples
            .into_iter()
            .map(|(labels, value)| metrics::sample(name, labels, value))
            .collect(),
    }
}

/// The exporter's own series: build information, scrape errors, process files.
fn self_families(
    errors: &BTreeMap<&'static str, u64>,
    process_files: Option<&process_metrics::ProcessMetrics>,
) -> Vec<Family> {
    let mut out = vec![
        family(
            "zpage_build_info",
            "gauge",
            "zpage build: version of the exporter (value 1).",
            vec![(vec![("version", env!("CARGO_PKG_VERSION").to_string())], 1.0)],
        ),
        family(
            "zpage_exporter_scrape_errors_total",
            "counter",
            "Things a scrape could not read and left out, by source (zram device attributes, zswap parameters, per-process metrics files that break the contract).",
            errors
                .iter()
                .map(|(source, count)| (vec![("source", source.to_string())], *count as f64))
                .collect(),
        ),
    ];
    if let Some(found) = process_files {
        let mut states = vec![(
            vec![("state", "merged".to_string())],
            found.files_merged as f64,
        )];
        states.extend(process_metrics::Skipped::ALL.iter().map(|&reason| {
            (
                vec![("state", reason.label().to_string())],
                found.count(reason) as f64,
            )
        }));
        out.push(family(
            "zpage_exporter_process_files",
            "gauge",
            "Per-process metrics files in the last scrape: merged, or skipped because their process is gone, stopped rewriting them (stale), or they break the contract (rejected).",
            states,
        ));
    }
    out
}

/// Checks text against the exposition format; returns the number of samples.
pub fn validate_text_format(text: &str) -> std::result::Result<usize, String> {
    text_format::parse(text).map(|families| families.iter().map(|f| f.samples.len()).sum())
}
