//! `zpage demo` (not built yet: see the open issue).

/// Arguments of `zpage demo`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("zpage demo is not built yet")
}
