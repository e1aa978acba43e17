//! `zpage analyze` (not built yet: see the open issue).

/// Arguments of `zpage analyze`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("zpage analyze is not built yet")
}
