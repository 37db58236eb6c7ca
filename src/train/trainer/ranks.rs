//! The rank protocol of a data-parallel run: rank 0 greets the others with the run they must
//! be part of, and every other rank serves rank 0's steps until the end.

use std::path::Path;

use super::model::{TrainModel, Trained};
use super::options::{RunOptions, RunSummary};
use super::parts::Trainer;
use super::setup::Setup;
use crate::accounting::filter::IndividualFilter;
use crate::collective::Collective;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::train::config::ValidConfig;
use crate::train::distributed;
use crate::train::folder::RunFolder;
use crate::train::shards;
use crate::train::state::{self, Expect, RunIdentity};

impl<'a, E: TrainModel> Trainer<'a, E> {
    /// Tells the other ranks where the run stands (the identity they must share, the step,
    /// where the ledger is), so each loads its shard of the ledger.
    pub(super) fn greet(&mut self) -> Result<()> {
        if self.comm.size() == 1 {
            return Ok(());
        }
        let hello = Hello {
            identity: Hello::digest(&self.identity)?,
            step: self.step,
            ledger_ranks: if self.step == 0 { None } else { self.ledger_on_disk },
        };
        let mut bytes = serde_json::to_vec(&hello).map_err(Error::serialise("rank 0's greeting"))?;
        self.comm.broadcast(&mut bytes)
    }
}

/// What rank 0 tells the other ranks before the first step: the run they must all be part
/// of, and where it stands.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Hello {
    /// SHA-256 of the run's identity (config, data files, examples, model, engine).
    identity: String,
    /// Steps completed.
    step: usize,
    /// Where the ledger is (`Meta::ledger_ranks`; `None` at step 0 or in the state file).
    ledger_ranks: Option<usize>,
}

impl Hello {
    pub(super) fn digest(identity: &RunIdentity) -> Result<String> {
        use sha2::Digest;
        let bytes = serde_json::to_vec(identity).map_err(Error::serialise("the run's identity"))?;
        Ok(sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect())
    }
}

/// A rank other than 0: builds its part of the run, loads its shard of the ledger from where
/// rank 0 says the run stands, and answers rank 0 until the end. Any failure aborts the run.
pub(super) fn serve_rank<E: TrainModel>(
    cfg: &ValidConfig,
    engine: E,
    data: &Dataset,
    dir: &Path,
    opts: &RunOptions,
    comm: &mut dyn Collective,
) -> Result<Trained<E>> {
    let (rank, ranks) = (comm.rank(), comm.size());
    let folder = RunFolder::of_run(dir, opts.candidate);
    let setup = Setup::new(cfg, engine, data, opts, (rank, ranks));
    let answered = setup.and_then(|s| {
        let mut bytes = Vec::new();
        comm.broadcast(&mut bytes)?;
        let hello: Hello = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Collective(format!("rank 0 sent a greeting this rank cannot read: {e}")))?;
        if hello.identity != Hello::digest(&s.identity)? {
            return Err(Error::Collective(format!(
                "rank {rank}'s run differs from rank 0's: every rank must run the same config (and model) on the \
                 same data files; check the files on rank {rank}'s machine"
            )));
        }
        if !folder.config().is_file() {
            return Err(Error::RunState {
                path: dir.into(),
                message: format!(
                    "rank {rank} does not see the run folder rank 0 wrote: put it on a file system every rank shares"
                ),
            });
        }
        let own = s.budgets.slice(s.shard.range.clone());
        let budget = own.max();
        let ledger = if hello.step == 0 {
            IndividualFilter::with_budgets(s.shard.range.len(), own)?
        } else {
            let in_state = match hello.ledger_ranks {
                Some(_) => Vec::new(),
                None => {
                    let expect = Expect { params: s.theta.len(), examples: s.n, max_steps: cfg.max_steps() };
                    state::read(&folder.state(), expect)?.map(|snap| snap.spent).unwrap_or_default()
                }
            };
            let at = (&in_state[..], hello.ledger_ranks);
            IndividualFilter::from_spent_with(
                own,
                shards::assemble(&folder, s.n, &s.shard.range, at, hello.step, budget)?,
            )?
        };
        let mut ledger = ledger;
        let part = (&s.plan, &mut ledger);
        let served = distributed::serve(cfg, part, (&folder, &s.shard), (&s.pool, s.n), comm, s.theta)?;
        let steps = hello.step + served.steps;
        let summary = RunSummary { dir: dir.into(), steps, finished: served.finished, result: None, privacy: None };
        Ok(Trained { summary, params: served.theta, engine: s.plan.into_net() })
    });
    if let Err(e) = &answered
        && !matches!(e, Error::Collective(_))
    {
        comm.abort(&e.to_string());
    }
    answered
}
