//! What a run checks and builds before any training example is read: its shard, its plan and
//! θ₀, its identity, every example's budget, memory, δ, and the rows' independence.

use std::path::Path;

use super::model::TrainModel;
use super::options::RunOptions;
use crate::accounting::filter::Budgets;
use crate::data::{Dataset, Examples, Normalize};
use crate::error::{Error, Result};
use crate::per_example::PerExample;
use crate::train::config::ValidConfig;
use crate::train::privacy::RunSession;
use crate::train::shards::Shard;
use crate::train::state::RunIdentity;
use crate::train::step::{Aggregation, GradientPlan};

/// What every rank of a run builds alike before it trains: its shard of the training examples
/// (all of them on one process), the plan that computes them, the model's θ₀, and the run's
/// identity — after the checks that refuse a run before any training example is read.
pub(super) struct Setup<'a, E: PerExample> {
    pub(super) plan: GradientPlan<'a, E>,
    pub(super) n: usize,
    pub(super) shard: Shard,
    pub(super) test: Examples<'a>,
    pub(super) norm: Normalize,
    pub(super) pool: rayon::ThreadPool,
    pub(super) identity: RunIdentity,
    pub(super) theta: Vec<f32>,
    /// Every one of the run's n training examples' ledger budget.
    pub(super) budgets: Budgets,
}

impl<'a, E: TrainModel> Setup<'a, E> {
    /// Rank `rank` of `ranks`'s part of the run of `cfg` on `data` with the engine `net`.
    pub(super) fn new(
        cfg: &'a ValidConfig,
        net: E,
        data: &'a Dataset,
        opts: &RunOptions,
        (rank, ranks): (usize, usize),
    ) -> Result<Self> {
        let c = cfg.config();
        if net.input_shape() != data.shape() || net.classes() != data.classes() {
            return Err(Error::Model(format!(
                "the model takes examples of shape {:?} and gives {} logits; the data in {} have shape {:?} \
                     ([channels, height, width]) and {} classes",
                net.input_shape(),
                net.classes(),
                data.dir.display(),
                data.shape(),
                data.classes()
            )));
        }
        let test = data.test.head(c.data.test_subset);
        let (n, shard, train) = rank_examples(data, c.data.train_subset, (rank, ranks))?;
        check_data(n, &test, &data.dir)?;
        check_delta(cfg, n)?;
        let threads = match opts.threads.unwrap_or(c.train.threads) {
            0 => net.preferred_threads().unwrap_or(0),
            n => n,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| Error::Environment(format!("cannot start {threads} worker threads: {e}")))?;
        let chunk = c.train.chunk.unwrap_or_else(|| net.preferred_chunk());
        let host_rows = !(net.keeps_rows() && cfg.method().training().is_private());
        check_memory(&net, (chunk, host_rows), pool.current_num_threads(), train.len())?;
        // Each example's budget: one for all, or its tier's (whose assignment the run is).
        let (budgets, assignment) = crate::train::budget::ledger_budgets(cfg, n)?;
        let identity = run_identity(cfg, &net, data, n, assignment)?;
        // The grid is the whole run's (its n), on every rank alike.
        let aggregation = Aggregation::for_run(cfg, &net, n)?;
        let theta = net.initial_params(c.model.init_seed)?;
        // What the sum's sensitivity rests on, checked on this engine, device and kernels at
        // this run's micro-batch size, before any training example is read.
        crate::per_example::check_rows_are_own(&net, &theta, chunk).map_err(|m| Error::Model(m.explained()))?;
        let norm = match &c.data.normalize {
            Some(n) => n.clone(),
            None => data.default_normalize(),
        };
        norm.check(data.shape()[0])?;
        let plan = GradientPlan::new(net, train, norm.clone(), aggregation, chunk);
        Ok(Self { plan, n, shard, test, norm, pool, identity, theta, budgets })
    }
}

/// The run's n training examples, rank `rank` of `ranks`'s shard of them, and that shard's
/// examples: from a dataset holding all of them (the first `train_subset`, all for 0), or only
/// this rank's shard (checked to be it).
fn rank_examples(
    data: &Dataset,
    train_subset: usize,
    (rank, ranks): (usize, usize),
) -> Result<(usize, Shard, Examples<'_>)> {
    Ok(match data.held_shard() {
        // The dataset holds this rank's shard alone (`Dataset::keep_shard`).
        Some((first, n, subset)) => {
            let shard = Shard::of(n, ranks, rank);
            if shard.range.start != first || shard.range.len() != data.train.len() || subset != train_subset {
                return Err(Error::Data {
                    path: data.dir.clone(),
                    message: format!(
                        "the dataset holds training examples {first}..{} of {n} (of data.train_subset = {subset}), \
                         but rank {rank} of {ranks} trains on {}..{}: call keep_shard with this run's \
                         data.train_subset, rank and number of ranks",
                        first + data.train.len(),
                        shard.range.start,
                        shard.range.end
                    ),
                });
            }
            (n, shard, data.train.head(0))
        }
        None => {
            // Rows appended after the first `train_subset` (an audit's input canaries) are the run's too.
            let all = data.train.head(if data.appended().is_some() { 0 } else { train_subset });
            let shard = Shard::of(all.len(), ranks, rank);
            let train = all.range(shard.range.clone());
            (all.len(), shard, train)
        }
    })
}

/// What identifies the run in its state: the config (the model's own identity in place of its
/// section), the data files and the budgets' assignment, n, the parameter count and the
/// engine.
fn run_identity<E: TrainModel>(
    cfg: &ValidConfig,
    net: &E,
    data: &Dataset,
    n: usize,
    assignment: Option<crate::data::Fingerprint>,
) -> Result<RunIdentity> {
    let c = cfg.config();
    let mut config = serde_json::to_value(c.identity()?).map_err(Error::serialise("the run's identity"))?;
    if let (Some(model), Some(section)) = (net.identity(), config.get_mut("model")) {
        *section = model;
    }
    Ok(RunIdentity {
        config,
        data: data.fingerprints().iter().cloned().chain(assignment).collect(),
        examples: n,
        params: net.num_params(),
        engine: Some(net.engine_name().to_string()),
    })
}

/// The privacy session of a run whose accounting has one (full-batch GD; DP-SGD releases
/// nothing but its model, and its guarantee is its accounting's alone).
pub(super) fn open_session(cfg: &ValidConfig, released_through: usize) -> Result<Option<RunSession>> {
    match cfg.accounting() {
        Some(a) if a.has_session() => RunSession::open(cfg, a.sigma(), released_through).map(Some),
        _ => Ok(None),
    }
}

/// The model is built for the data's own shape; this refuses an empty split (`n` training
/// examples in the whole run).
pub(super) fn check_data(n: usize, test: &Examples<'_>, dir: &Path) -> Result<()> {
    if n == 0 || test.is_empty() {
        return Err(Error::Data {
            path: dir.into(),
            message: format!("{n} training and {} test examples: both must be at least 1", test.len()),
        });
    }
    Ok(())
}

/// Refuses δ ≥ 1/n for a private run: releasing one random training example whole is
/// (0, 1/n)-DP, so such a guarantee promises nothing (n is public under both relations).
pub(super) fn check_delta(cfg: &ValidConfig, n: usize) -> Result<()> {
    let delta = cfg.config().privacy.delta;
    if cfg.is_private_method() && delta * n as f64 >= 1.0 {
        return Err(Error::config(
            "privacy.delta",
            format!(
                "{delta} is at least 1/n for n = {n} training examples: a run that published one random example \
                 whole would meet it; use delta well below 1/n, e.g. {:e}",
                10f64.powf((0.1 / n.max(1) as f64).log10().floor())
            ),
        ));
    }
    Ok(())
}

/// Refuses a run whose buffers would not fit in memory, before allocating them: micro-batches of
/// `chunk`, their rows on the host unless the engine keeps them on its device (`host_rows`).
pub(super) fn check_memory(
    net: &impl PerExample,
    (chunk, host_rows): (usize, bool),
    threads: usize,
    examples: usize,
) -> Result<()> {
    let p = net.num_params() as u64;
    let needed = |chunk: usize, threads: usize| {
        let per_thread = net.scratch_bytes(chunk).and_then(|ws| {
            let grads = if host_rows { (chunk as u64).checked_mul(p)?.checked_mul(4)? } else { 0 };
            let x = (chunk as u64).checked_mul(net.input_len() as u64)?.checked_mul(4)?;
            ws.checked_add(grads)?.checked_add(x)?.checked_add(p.checked_mul(8)?)
        });
        // At least two sets: the check of the rows before training holds two micro-batches.
        per_thread
            .and_then(|b| b.checked_mul(threads.max(2) as u64))
            .and_then(|b| b.checked_add((examples as u64).checked_mul(8)?))
            .and_then(|b| b.checked_add(p.checked_mul(16)?))
    };
    let fits = |b: Option<u64>| b.is_some_and(|b| b <= crate::memory::limit());
    // The largest chunk below `chunk` that fits on `t` threads (needs grow with the chunk).
    let largest = |t: usize| {
        let (mut lo, mut hi) = (0usize, chunk);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(needed(mid, t)) { lo = mid } else { hi = mid - 1 }
        }
        lo
    };
    let fix = if fits(needed(1, 1)) {
        match largest(threads) {
            0 => format!("lower train.threads: train.chunk = {} fits on 1 thread", largest(1)),
            c => format!("lower train.chunk to at most {c} (on {threads} threads), or train.threads"),
        }
    } else {
        // Even one example at a time does not fit: the model is too large, and the advice says where.
        match net.largest_part() {
            Some((part, n)) => format!(
                "the model is too large even at train.chunk = 1 on 1 thread: it has {p} parameters, {n} of them in \
                 {part}; use a smaller model"
            ),
            None => format!("the model is too large even at train.chunk = 1 on 1 thread ({p} parameters)"),
        }
    };
    crate::memory::check(
        &format!("training with train.chunk = {chunk} on {threads} threads"),
        needed(chunk, threads),
        &fix,
    )
}

pub(super) fn resolved_config(cfg: &ValidConfig, norm: &Normalize, model: Option<serde_json::Value>) -> Result<String> {
    let text = toml::to_string_pretty(cfg.config())
        .map_err(|e| Error::Serialise { what: "the run's config", message: e.to_string() })?;
    let mut head = match cfg.sigma() {
        Some(s) => format!("# resolved noise multiplier: sigma = {s}\n"),
        None => String::new(),
    };
    if cfg.config().data.normalize.is_none() {
        head += &format!(
            "# resolved normalisation (public: the dataset's published constants, its test split's, or none for \
             [data.features]): mean = {}, std = {}\n",
            norm.mean, norm.std
        );
    }
    if let Some(model) = model {
        head += &format!("# model: not the [model] section but a burn module on the burn engine: {model}\n");
    }
    Ok(head + &text)
}
