//! `zpage.analyze` and `zpage.kernel_status`: the documents `zpage analyze
//! --json` and `zpage kernel status --json` print, as Python objects.

use crate::errors::{error, ErrorKind};
use pyo3::prelude::*;
use std::path::PathBuf;
use zpage_analyze::{
    analyze_source, AnalyzeOptions, ChainSource, FileSource, PageSource, ProcessSource, Report,
};
use zpage_region::{CodecSpec, PoolKind};

fn analyze_error(e: impl std::fmt::Display) -> PyErr {
    error(ErrorKind::Analyze, e.to_string())
}

/// What to analyse: a memory image file (str or os.PathLike) or a PID (int).
enum Target {
    Image(PathBuf),
    Process(u32),
}

fn target(value: &Bound<'_, PyAny>) -> PyResult<Target> {
    if let Ok(pid) = value.extract::<i64>() {
        return u32::try_from(pid).map(Target::Process).map_err(|_| {
            error(
                ErrorKind::Config,
                format!("{pid} is not a process ID: give a PID (a positive int) or the path of a memory image"),
            )
        });
    }
    if let Ok(path) = value.extract::<PathBuf>() {
        return Ok(Target::Image(path));
    }
    Err(error(
        ErrorKind::Config,
        format!(
            "analyze() takes a PID (int) or the path of a memory image (str or os.PathLike), not {}",
            value.get_type().name()?
        ),
    ))
}

/// Measures how well memory compresses, as `zpage analyze --json` does: a
/// memory image (raw dump of 4 KiB pages) or a live process's resident
/// private anonymous pages. Returns the JSON document (docs/analyze-json.md)
/// as dicts and lists.
#[pyfunction]
#[pyo3(signature = (path_or_pid, codecs=None, pools=None, *, rounds=3, max_pages=None))]
pub(crate) fn analyze<'py>(
    py: Python<'py>,
    path_or_pid: &Bound<'py, PyAny>,
    codecs: Option<Vec<String>>,
    pools: Option<Vec<String>>,
    rounds: u32,
    max_pages: Option<u64>,
) -> PyResult<Bound<'py, PyAny>> {
    let target = target(path_or_pid)?;
    let codecs = match codecs {
        None => AnalyzeOptions::default_codecs(),
        Some(names) => names
            .iter()
            .map(|n| n.parse::<CodecSpec>())
            .collect::<Result<_, _>>()
            .map_err(|e| error(ErrorKind::Config, e.to_string()))?,
    };
    let pools = match pools {
        None => PoolKind::all().to_vec(),
        Some(names) => names
            .iter()
            .map(|n| n.parse::<PoolKind>())
            .collect::<Result<_, _>>()
            .map_err(|e| error(ErrorKind::Config, e.to_string()))?,
    };
    let options = AnalyzeOptions {
        codecs,
        pools,
        decompress_rounds: rounds,
        ..AnalyzeOptions::default()
    };
    let report = py.detach(|| -> PyResult<Report> {
        let source: Box<dyn PageSource> = match &target {
            Target::Image(path) => Box::new(FileSource::open(path, None).map_err(analyze_error)?),
            Target::Process(pid) => {
                let source = ProcessSource::open(*pid, max_pages).map_err(analyze_error)?;
                if source.total_pages() == 0 {
                    return Err(analyze_error(format!(
                        "PID {pid} has no resident private anonymous pages to analyse"
                    )));
                }
                Box::new(source)
            }
        };
        let mut memory = ChainSource::new(vec![source]);
        let analysis = analyze_source(&mut memory, &options, &mut |_| {}).map_err(analyze_error)?;
        Ok(Report::new(memory.sources(), analysis))
    })?;
    crate::json::to_python(py, &report)
}

/// The kernel's compressed-memory state (zram devices, zswap, swap), as
/// `zpage kernel status --json` prints it.
#[pyfunction]
pub(crate) fn kernel_status(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let status = py.detach(zpage_kernel::status::collect);
    crate::json::to_python(py, &status)
}
