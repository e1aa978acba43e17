//! `zpage kernel` and `zpage exporter`: the CLI edge over `zpage_kernel`.

use std::time::Duration;

use anyhow::Context as _;
use zpage_kernel::status;

/// Arguments of `zpage kernel`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: KernelCommand,
}

#[derive(Debug, clap::Subcommand)]
enum KernelCommand {
    /// zram devices, zswap, swap areas, sysctls and memory pressure, with units.
    Status(StatusArgs),
}

#[derive(Debug, clap::Args)]
struct StatusArgs {
    /// Print JSON (the raw kernel figures, bytes and pages).
    #[arg(long)]
    json: bool,
    /// Redraw every INTERVAL seconds until interrupted.
    #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "2")]
    watch: Option<f64>,
    /// With --watch: stop after this many refreshes.
    #[arg(long, requires = "watch")]
    count: Option<u64>,
}

/// Runs `zpage kernel ...`.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        KernelCommand::Status(a) => run_status(a),
    }
}

fn run_status(args: StatusArgs) -> anyhow::Result<()> {
    let Some(interval) = args.watch else {
        return print_status(args.json);
    };
    anyhow::ensure!(
        interval.is_finite() && interval >= 0.1,
        "--watch interval must be at least 0.1 seconds"
    );
    let mut refreshes = 0u64;
    loop {
        if !args.json {
            // Clear the screen and move home, so the view updates in place.
            print!("\x1b[2J\x1b[H");
        }
        print_status(args.json)?;
        refreshes += 1;
        if args.count.is_some_and(|c| refreshes >= c) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs_f64(interval));
    }
}

fn print_status(json: bool) -> anyhow::Result<()> {
    let snapshot = status::collect();
    let text = if json {
        serde_json::to_string_pretty(&snapshot).context("encode status as JSON")? + "\n"
    } else {
        snapshot.render_text()
    };
    write_stdout(&text)
}

/// Writes to stdout; a closed pipe (`| head`) ends quietly instead of panicking.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e).context("write to stdout"),
    }
}

/// Arguments of `zpage exporter`.
#[derive(Debug, clap::Args)]
pub struct ExporterArgs {}

/// Runs `zpage exporter`.
pub fn run_exporter(_args: ExporterArgs) -> anyhow::Result<()> {
    anyhow::bail!("zpage exporter is not built yet")
}
