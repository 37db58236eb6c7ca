//! Config-driven sweeps: named cases and a grid of config overrides (and seeds) expanded into
//! runs that execute one or several at a time and resume where they stopped.
//!
//! ```toml
//! name = "tiny"
//! base = "configs/mnist-plain.toml"      # every run starts from this config
//! [set]                                  # overrides shared by every run
//! "data.train_subset" = 2000
//! [cases.small-clip]                     # optional named override sets (each crossed with the grid)
//! "privacy.clip" = 0.5
//! [cases.large-clip]
//! "privacy.clip" = 2.0
//! seeds = [1, 2, 3]                      # a case may run at its own seeds instead of the grid's
//! [grid]                                 # the cartesian product of these lists
//! "privacy.epsilon" = [0.5, 1.0]
//! "privacy.method" = ["plain", "filtered"]
//! seeds = [1, 2]                         # noise seeds (train.seed)
//! ```
//!
//! Every expanded config is validated before the first run starts. Runs live in
//! `<sweep dir>/runs/<id>/` (run folders, see [`crate::train::folder`]); a finished run is
//! never redone, an interrupted one is resumed, and adding grid points later runs only the new
//! ones. Each finished run is a row of `<sweep dir>/results.csv` and `results.jsonl`;
//! [`report`] summarises them.

mod execute;
mod plan;
mod report;
pub mod search;

pub use execute::{ExecuteOptions, QuietSweep, SweepObserver, execute};
pub use plan::{MAX_RUNS, PlannedRun, SweepFile, default_results, plan, plan_with, value_text};
pub use report::{ResultRow, report, write_results};

/// Refuses a sweep launched as one of `ranks` > 1 processes (`mpirun -np N dpgd sweep …`):
/// every rank would run the whole sweep (or private search) on its own, drawing its own
/// candidates; a sweep's runs, and a search's candidates, each run in one process.
///
/// # Errors
/// `ranks` above 1, naming both options.
pub fn one_process(ranks: usize) -> crate::Result<()> {
    if ranks > 1 {
        return Err(crate::Error::config(
            "ranks",
            format!(
                "dpgd sweep (and its private search, --select private) runs in one process, but it was launched as \
                 one of {ranks} ranks: run it without mpirun (its runs and candidates each train in that process)"
            ),
        ));
    }
    Ok(())
}
