//! `zpage bench` (not built yet: see the open issue).

/// Arguments of `zpage bench`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("zpage bench is not built yet")
}
