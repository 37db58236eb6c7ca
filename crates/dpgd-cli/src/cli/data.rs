//! `dpgd data`: the dataset step.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub(crate) enum DataCommand {
    /// Fill datasets/<NAME> from a local copy ($DPGD_DATASETS/<NAME>, /usr/share/datasets/<NAME>,
    /// or --from) or the public mirrors, verifying each file.
    Fetch {
        /// mnist or fashion-mnist.
        name: String,
        /// A folder holding the four IDX files (gzip or raw).
        #[arg(long)]
        from: Option<PathBuf>,
        /// Destination folder (default datasets/<NAME>).
        #[arg(long)]
        to: Option<PathBuf>,
    },
}

pub(crate) fn run(cmd: DataCommand) -> Result<()> {
    match cmd {
        DataCommand::Fetch { name, from, to } => {
            if from.is_none() && !dpgd::data::fetch::KNOWN.iter().any(|k| k.name == name) {
                anyhow::bail!(
                    "unknown dataset `{name}`: the fetch step knows mnist and fashion-mnist; for another dataset in \
                     IDX format pass --from DIR"
                );
            }
            let dest = to.unwrap_or_else(|| PathBuf::from("datasets").join(&name));
            for f in dpgd::data::fetch::fetch(&name, &dest, from.as_deref())? {
                let check = if f.verified { "SHA-256 verified" } else { "structure verified (no published SHA-256)" };
                println!("{}  <- {} ({check})", f.path.display(), f.source);
            }
            Ok(())
        }
    }
}
