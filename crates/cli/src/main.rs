//! `zpage`: see what memory compression does for your programs, run them on
//! compressed memory, and keep the kernel's zram and zswap healthy.

use clap::{CommandFactory, Parser, Subcommand};

mod backing_args;
mod bench_plots;
mod bench_report;
mod budget_flags;
mod cmd_analyze;
mod cmd_bench;
mod cmd_demo;
mod cmd_kernel;
mod cmd_run;
mod run_auto_budget;
mod run_diagnosis;
mod run_figures;
mod run_memory_max;
mod table;

#[derive(Debug, Parser)]
#[command(name = "zpage", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// How well does this memory compress? Images, a PID, or every readable process.
    Analyze(cmd_analyze::Args),
    /// Benchmarks on a compressed region, side by side with the kernel's zram and zswap.
    Bench(Box<cmd_bench::Args>),
    /// A realistic data set several times the budget, on a compressed region, with live stats.
    Demo(cmd_demo::Args),
    /// Status, configuration and monitoring of the kernel's zram and zswap.
    Kernel(cmd_kernel::Args),
    /// Prometheus exporter for zram, zswap, swap devices and zpage regions.
    Exporter(cmd_kernel::ExporterArgs),
    /// Run a program with a compressed memory budget; its exit status passes through.
    Run(cmd_run::Args),
    /// Print shell completions for zpage to stdout (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write zpage's man pages (zpage.1 and one per subcommand) into a directory.
    Manpages {
        /// The directory (made if missing).
        dir: std::path::PathBuf,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Analyze(args) => cmd_analyze::run(args),
        Command::Bench(args) => cmd_bench::run(*args),
        Command::Demo(args) => cmd_demo::run(args),
        Command::Kernel(args) => cmd_kernel::run(args),
        Command::Exporter(args) => cmd_kernel::run_exporter(args),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "zpage", &mut std::io::stdout());
            Ok(())
        }
        Command::Manpages { dir } => write_manpages(&dir),
        // The program's exit status passes through, and a death by a
        // signal ends zpage by the same signal; as env(1) and timeout(1)
        // do, a program not found is 127, one that cannot run 126, and
        // zpage's own failure to start it 125.
        Command::Run(args) => {
            return match cmd_run::run(args) {
                Ok(cmd_run::RunExit::Code(code)) => std::process::ExitCode::from(code),
                Ok(cmd_run::RunExit::Signal(signal)) => {
                    zpage_kernel::supervise::exit_by_signal(signal)
                }
                Err(error) => {
                    eprintln!("zpage: error: {}", error_text(&error));
                    let launch = error.downcast_ref::<zpage_kernel::supervise::LaunchError>();
                    std::process::ExitCode::from(launch.map_or(125, |e| e.status))
                }
            }
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("zpage: error: {}", error_text(&error));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each said once: library errors often quote
/// their cause already (`cannot read X: No such file`), and printing the
/// chain again would repeat it.
fn error_text(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// The man pages of zpage and every subcommand, one file each.
fn write_manpages(dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("writing man pages into {}", dir.display()))
}
