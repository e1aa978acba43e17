//! `zpage kernel` (not built yet: see the open issue).

/// Arguments of `zpage kernel`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("zpage kernel is not built yet")
}

/// Arguments of `zpage exporter`.
#[derive(Debug, clap::Args)]
pub struct ExporterArgs {}

pub fn run_exporter(_args: ExporterArgs) -> anyhow::Result<()> {
    anyhow::bail!("zpage exporter is not built yet")
}
