//! The entry point: one run's parts in one struct ([`Run`], as burn-train's components
//! struct), trained as the config's model or a model of your own, on one process or as one
//! rank of a data-parallel run.

use std::path::Path;

use super::model::{TrainModel, Trained};
use super::options::{RunOptions, RunSummary};
use super::parts::Trainer;
use super::ranks::serve_rank;
use crate::collective::{Collective, Solo};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::model::ConfigModel;
use crate::per_example::Network;
use crate::train::config::{Engine, ValidConfig};
use crate::train::folder::RunFolder;
use crate::train::input_canaries::InputCanaries;
use crate::train::observer::{Observer, Silent};

/// One training run's parts: what to train (`cfg` on `data`) and where (`dir`), its options,
/// who is told of its progress, and which process of a data-parallel run this is. Each part
/// beyond the first three has a default — [`RunOptions::default`], no observer ([`Silent`]),
/// one process ([`Solo`]) — and a method that sets it; then [`train`](Self::train) trains the
/// config's model, [`train_model`](Self::train_model) a model of yours.
///
/// ```no_run
/// # use dpgd::train::{Run, Silent, TrainConfig};
/// # fn main() -> dpgd::Result<()> {
/// let cfg = TrainConfig::from_file("configs/mnist-filtered.toml".as_ref(), &[])?.validate()?;
/// let data = cfg.config().data.load()?;
/// let summary = Run::new(&cfg, &data, "runs/demo".as_ref()).train()?;
/// // As one rank of a data-parallel run: every rank runs this with the same config, data, folder.
/// # let mut comm = dpgd::collective::Solo;
/// let summary = Run::new(&cfg, &data, "runs/demo".as_ref()).ranks(&mut comm).train()?;
/// # Ok(()) }
/// ```
pub struct Run<'a> {
    cfg: &'a ValidConfig,
    data: &'a Dataset,
    dir: &'a Path,
    opts: RunOptions,
    observer: Option<&'a mut dyn Observer>,
    comm: Option<&'a mut dyn Collective>,
}

impl<'a> Run<'a> {
    /// The run of `cfg` on `data` in the folder `dir`: with the default options, silent, on
    /// one process.
    #[must_use]
    pub fn new(cfg: &'a ValidConfig, data: &'a Dataset, dir: &'a Path) -> Self {
        Self { cfg, data, dir, opts: RunOptions::default(), observer: None, comm: None }
    }

    /// With `opts` (threads, a stop after some steps).
    #[must_use]
    pub fn options(self, opts: RunOptions) -> Self {
        Self { opts, ..self }
    }

    /// Telling `observer` of its start, steps, warnings and end (on rank 0 of several).
    #[must_use]
    pub fn observer(self, observer: &'a mut dyn Observer) -> Self {
        Self { observer: Some(observer), ..self }
    }

    /// As one rank of the data-parallel run `comm`: every rank runs the same config on the same
    /// data in the same folder (on a file system every rank sees); the steps, model and
    /// `privacy.json` are one process's, bit for bit. Rank 0 writes the run folder and tells the
    /// observer; on the other ranks the summary has no result.
    #[must_use]
    pub fn ranks(self, comm: &'a mut dyn Collective) -> Self {
        Self { comm: Some(comm), ..self }
    }

    /// Trains the config's model to the end (or `opts.stop_after` steps), resuming the run the
    /// folder holds; a finished run is not redone (its summary is read back).
    ///
    /// # Errors
    /// As [`Trainer::resume_or_init`], [`Trainer::step`] and [`Trainer::finish`]; another
    /// rank failed (every rank stops, naming it).
    pub fn train(self) -> Result<RunSummary> {
        self.with_defaults(|cfg, parts, observer, comm| train_config_model(cfg, parts, observer, comm))
    }

    /// Trains `engine`'s model (e.g. a [`BurnEngine`](crate::per_example::BurnEngine) around
    /// your burn model) as [`train`](Self::train) does the config's, and returns the trained
    /// parameters with the summary; `cfg`'s `model` section is not used. On ranks other than 0
    /// the parameters are the θ of the last step this rank computed (not the model rank 0
    /// returns, which a stopping rule may pick from an earlier step).
    ///
    /// # Errors
    /// As [`Trainer::with_engine`] and [`train`](Self::train); a finished run (its parameters
    /// are in its folder's model file).
    pub fn train_model<E: TrainModel>(self, engine: E) -> Result<Trained<E>> {
        self.with_defaults(|cfg, parts, observer, comm| train_model(cfg, engine, parts, observer, comm))
    }

    /// Calls `train` with the run's parts, a silent observer and one process where none is set.
    fn with_defaults<R>(
        self,
        train: impl FnOnce(&ValidConfig, Parts<'_>, &mut dyn Observer, &mut dyn Collective) -> R,
    ) -> R {
        let (mut silent, mut solo) = (Silent, Solo);
        let observer: &mut dyn Observer = match self.observer {
            Some(o) => o,
            None => &mut silent,
        };
        let comm: &mut dyn Collective = match self.comm {
            Some(c) => c,
            None => &mut solo,
        };
        train(self.cfg, (self.data, self.dir, &self.opts), observer, comm)
    }
}

/// The data, folder and options of a run.
type Parts<'a> = (&'a Dataset, &'a Path, &'a RunOptions);

/// Trains per `cfg` on `data` in `dir`, on one process: [`Run`] with `opts` and `observer`.
///
/// # Errors
/// As [`Run::train`].
pub fn run(
    cfg: &ValidConfig,
    data: &Dataset,
    dir: &Path,
    opts: &RunOptions,
    observer: &mut dyn Observer,
) -> Result<RunSummary> {
    Run::new(cfg, data, dir).options(opts.clone()).observer(observer).train()
}

/// [`Run::train`]: builds the config's model on its engine (the fast engine, or the burn
/// engine for `train.engine = "burn"` or a kind the fast engine lacks) and trains it.
fn train_config_model(
    cfg: &ValidConfig,
    (data, dir, opts): Parts<'_>,
    observer: &mut dyn Observer,
    comm: &mut dyn Collective,
) -> Result<RunSummary> {
    if comm.rank() == 0 && RunFolder::of_run(dir, opts.candidate).is_finished() {
        return RunSummary::read_folder(&RunFolder::of_run(dir, opts.candidate));
    }
    let built = (|| -> Result<std::result::Result<ConfigModel, Network>> {
        let spec = cfg.model_for(data.shape(), data.classes())?;
        if cfg.engine_for(&spec) != Engine::Burn {
            let net = Network::new(&spec).map_err(|e| Error::config("model", e.to_string()))?;
            return Ok(Err(net));
        }
        let c = cfg.config();
        // θ, the modules holding it and their initial values: checked before any is allocated.
        let params = crate::model::spec_params(&spec).map_err(|e| Error::config("model", e.to_string()))?;
        let bytes = params.and_then(|p| u64::try_from(p).ok()?.checked_mul(12));
        crate::memory::check("the model's parameters", bytes, "use a smaller model")?;
        Ok(Ok(ConfigModel::new(&spec, &c.train.device.device()?, c.model.init_seed)?))
    })();
    let parts = (data, dir, opts);
    match built {
        Ok(Ok(model)) => Ok(train_model(cfg, model, parts, observer, comm)?.summary),
        Ok(Err(net)) => Ok(train_model(cfg, net, parts, observer, comm)?.summary),
        Err(e) => {
            comm.abort(&e.to_string());
            Err(e)
        }
    }
}

/// [`Run::train_model`]: rank 0 trains (the loop), every other rank serves it.
fn train_model<E: TrainModel>(
    cfg: &ValidConfig,
    engine: E,
    (data, dir, opts): Parts<'_>,
    observer: &mut dyn Observer,
    comm: &mut dyn Collective,
) -> Result<Trained<E>> {
    if comm.rank() != 0 {
        return serve_rank(cfg, engine, data, dir, opts, comm);
    }
    // An audit's input canaries join the training rows (on one process: the trainer refuses ranks).
    let prepared = match comm.size() {
        1 => InputCanaries::prepare(cfg, data, &RunFolder::of_run(dir, opts.candidate)),
        _ => Ok(None),
    };
    let (inputs, with) = match prepared {
        Ok(Some((inputs, with))) => (Some(inputs), Some(with)),
        Ok(None) => (None, None),
        Err(e) => {
            comm.abort(&e.to_string());
            return Err(e);
        }
    };
    let data = with.as_ref().unwrap_or(data);
    let mut trainer = Trainer::with_inputs_on(cfg, (engine, data), dir, opts, observer, comm, inputs)?;
    while !trainer.is_done() {
        if let Err(e) = trainer.step() {
            trainer.abort(&e);
            return Err(e);
        }
    }
    trainer.finish_returning()
}
