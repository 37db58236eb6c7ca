//! Data-parallel training on 1–4 ranks simulated as threads ([`InProcess`]): the same model
//! bytes, records and `privacy.json` as one process for every method, and crash safety with a
//! rank killed at every phase of a step, resumed on another number of ranks.

mod common;

use std::path::{Path, PathBuf};

use common::{fixture_config, metrics};
use dpgd::accounting::filter::IndividualFilter;
use dpgd::collective::{Collective, InProcess};
use dpgd::train::shards;
use dpgd::train::state::{self, Expect};
use dpgd::train::{Run, RunFolder, RunOptions, RunSummary, TrainConfig};

const EXAMPLES: usize = 301;

/// The methods, each with what its guarantee rests on: filtered GD with a noisy active count
/// and the stopping rule's noisy training accuracy (which asks every rank for its count), plain
/// GD, DP-SGD, and DP-SGD with individual accounting.
fn configs() -> Vec<(&'static str, String)> {
    let c = |name, privacy: &str, train: &str| fixture_config(name, "logistic", (EXAMPLES, 100), privacy, train);
    vec![
        (
            "filtered",
            c(
                "dp-filtered",
                "method = \"filtered\"\nepsilon = 2.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 4",
                "lr = 1.0\nseed = 5\nchunk = 16\nmax_steps = 9\neval_every = 3\n[release]\nactive_count = \"noisy\"\n\
                 active_count_sigma = 20.0\nactive_count_every = 2\n[stopping]\nrule = \"best-train-accuracy\"\n\
                 every = 2\nsigma = 20.0",
            ),
        ),
        (
            "plain",
            c(
                "dp-plain",
                "method = \"plain\"\nsigma = 2.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 6",
                "lr = 1.0\nseed = 6\nchunk = 16",
            ),
        ),
        (
            "sgd",
            c(
                "dp-sgd",
                "method = \"sgd\"\nsample_rate = 0.2\nsigma = 1.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 7",
                "lr = 1.0\nseed = 7\nchunk = 16",
            ),
        ),
        (
            "sgd-filtered",
            c(
                "dp-sgd-filtered",
                "method = \"sgd-filtered\"\nsample_rate = 0.2\nsigma = 1.0\ndelta = 1e-5\nclip = 20.0\nworst_case_steps = 3",
                "lr = 1.0\nseed = 8\nchunk = 16\nmax_steps = 8",
            ),
        ),
        // Personalized budgets: each rank's examples keep their own tiers.
        (
            "filtered with tiers",
            c(
                "dp-filtered-tiers",
                "method = \"filtered\"\nepsilon = 2.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 3\n\
                 [privacy.budgets]\nepsilons = [2.0, 5.0]\nshares = [0.5, 0.5]\nseed = 3",
                "lr = 1.0\nseed = 9\nchunk = 16\nmax_steps = 9\n[release]\nactive_count = \"noisy\"\n\
                 active_count_sigma = 20.0\nactive_count_every = 2",
            ),
        ),
        (
            "sgd-filtered with tiers",
            c(
                "dp-sgd-filtered-tiers",
                "method = \"sgd-filtered\"\nsample_rate = 0.2\nsigma = 1.0\ndelta = 1e-5\nclip = 20.0\n\
                 worst_case_steps = 3\n[privacy.budgets]\nepsilons = [30.0, 60.0]\nshares = [0.5, 0.5]",
                "lr = 1.0\nseed = 10\nchunk = 16\nmax_steps = 8",
            ),
        ),
    ]
}

/// A collective that fails this rank at its `at`-th call of one kind, as a process that dies
/// there would: its part of the operation never arrives, and the others are told.
struct Dies {
    inner: InProcess,
    at: Option<(Op, usize)>,
    calls: [usize; 3],
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Broadcast,
    SumInts,
    SumFloats,
}

impl Dies {
    fn call(&mut self, op: Op) -> dpgd::Result<()> {
        self.calls[op as usize] += 1;
        if self.at == Some((op, self.calls[op as usize])) {
            self.inner.abort("killed by the test");
            return Err(dpgd::Error::Collective(format!(
                "rank {} killed at {op:?} #{}",
                self.rank(),
                self.calls[op as usize]
            )));
        }
        Ok(())
    }
}

impl Collective for Dies {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn sum_to_root(&mut self, v: &mut [i64]) -> dpgd::Result<()> {
        self.call(Op::SumInts)?;
        self.inner.sum_to_root(v)
    }
    fn sum_to_root_f64(&mut self, v: &mut [f64]) -> dpgd::Result<()> {
        self.call(Op::SumFloats)?;
        self.inner.sum_to_root_f64(v)
    }
    fn broadcast(&mut self, b: &mut Vec<u8>) -> dpgd::Result<()> {
        self.call(Op::Broadcast)?;
        self.inner.broadcast(b)
    }
    fn abort(&mut self, why: &str) {
        self.inner.abort(why);
    }
}

/// Trains `text` into `dir` on `ranks` threads, rank `dies.0` failing at `dies.1`; every
/// rank's outcome.
fn train_on(text: &str, dir: &Path, ranks: usize, dies: Option<(usize, (Op, usize))>) -> Vec<dpgd::Result<RunSummary>> {
    train_some(text, dir, ranks, dies, None)
}

/// As [`train_on`], stopping after `stop_after` steps if given.
fn train_some(
    text: &str,
    dir: &Path,
    ranks: usize,
    dies: Option<(usize, (Op, usize))>,
    stop_after: Option<usize>,
) -> Vec<dpgd::Result<RunSummary>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = InProcess::group(ranks)
            .into_iter()
            .map(|inner| {
                let at = dies.filter(|d| d.0 == inner.rank()).map(|d| d.1);
                s.spawn(move || {
                    let mut comm = Dies { inner, at, calls: [0; 3] };
                    let cfg = TrainConfig::from_toml(text, &[])?.validate()?;
                    let data = cfg.config().data.load()?;
                    // On an even number of ranks each keeps only its shard in memory (as
                    // `dpgd train` does); on an odd one, all of it.
                    let data = if ranks.is_multiple_of(2) {
                        data.keep_shard(cfg.config().data.train_subset, ranks, comm.rank())
                    } else {
                        data
                    };
                    let opts = RunOptions { threads: Some(1), stop_after, ..Default::default() };
                    Run::new(&cfg, &data, dir).options(opts).ranks(&mut comm).train()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Every file of the folder's publishable half, by name, but burn's record of the model
/// (`model.bpk`), whose parameter ids burn draws at random for every module it builds, so that
/// two runs of one process differ there too; the model's values are `model.safetensors`.
fn publishable(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(RunFolder::new(dir).publishable())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_none_or(|e| e != "bpk"))
        .map(|p| (p.file_name().unwrap().into(), std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    files
}

#[test]
fn every_method_gives_the_one_process_run_bit_for_bit_on_2_3_and_4_ranks() {
    for (method, text) in configs() {
        let one = tempfile::tempdir().unwrap();
        let solo = train_on(&text, one.path(), 1, None).pop().unwrap().unwrap();
        assert!(solo.finished);
        let want = publishable(one.path());
        assert!(want.iter().any(|(f, _)| f == Path::new("model.safetensors")), "{method}");
        for ranks in 2..=4 {
            let dir = tempfile::tempdir().unwrap();
            let outcomes = train_on(&text, dir.path(), ranks, None);
            for (rank, o) in outcomes.iter().enumerate() {
                assert!(o.is_ok(), "{method} on {ranks} ranks, rank {rank}: {:?}", o.as_ref().err());
            }
            let got = publishable(dir.path());
            for ((f, a), (g, b)) in want.iter().zip(&got) {
                assert_eq!(f, g);
                assert!(a == b, "{method} on {ranks} ranks: {} differs from one process's", f.display());
            }
            assert_eq!(want.len(), got.len(), "{method}");
            // The ledger is sharded beside the data: the state holds none of it.
            let s = state::peek_meta(&RunFolder::new(dir.path()).state()).unwrap();
            assert_eq!(s.ledger_ranks, Some(ranks), "{method}");
            // The owner's budget report (`dpgd inspect`) reads the shards: every example, and
            // the one-process run's spending. It read the state's empty ledger: 0 examples.
            let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
            let sharded = dpgd::train::budget::spent(&RunFolder::new(dir.path()), 7850, cfg.max_steps()).unwrap();
            let whole = dpgd::train::budget::spent(&RunFolder::new(one.path()), 7850, cfg.max_steps()).unwrap();
            assert_eq!(sharded, whole, "{method} on {ranks} ranks");
            let report = dpgd::train::budget::report(&RunFolder::new(dir.path()), &cfg, 7850).unwrap();
            assert_eq!(report.examples, EXAMPLES, "{method} on {ranks} ranks");
        }
    }
}

/// A run stopped after 4 steps on 3 ranks and resumed on 2 (its ledger re-sharded), then
/// stopped again and finished on 1, ends bit for bit where the uninterrupted one-process run
/// does; every rank knows whether the run finished.
#[test]
fn a_run_stopped_on_three_ranks_resumes_on_two_then_one() {
    let text = &configs()[0].1;
    let one = tempfile::tempdir().unwrap();
    assert!(train_on(text, one.path(), 1, None)[0].as_ref().unwrap().finished);
    let dir = tempfile::tempdir().unwrap();
    for (ranks, stop_after, finished) in [(3, Some(4), false), (2, Some(2), false), (1, None, true)] {
        let outcomes = train_some(text, dir.path(), ranks, None, stop_after);
        for o in &outcomes {
            assert_eq!(o.as_ref().unwrap().finished, finished, "on {ranks} ranks");
        }
        let folder = RunFolder::new(dir.path());
        let meta = state::peek_meta(&folder.state()).unwrap();
        assert_eq!(meta.ledger_ranks, (ranks > 1).then_some(ranks));
        // Only the shards the state names are left.
        let shards = std::fs::read_dir(folder.confidential())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("ledger-"))
            .count();
        assert_eq!(shards, if ranks > 1 { ranks } else { 0 });
    }
    assert_eq!(publishable(dir.path()), publishable(one.path()));
}

/// A rank whose config differs from rank 0's (here its learning rate) stops every rank before
/// the first step, and says which; nothing is trained.
#[test]
fn a_rank_with_other_settings_stops_every_rank_naming_it() {
    let text = configs()[1].1.clone();
    let other = text.replace("lr = 1.0", "lr = 0.5");
    let dir = tempfile::tempdir().unwrap();
    let errors: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = InProcess::group(3)
            .into_iter()
            .map(|mut comm| {
                let text = if comm.rank() == 2 { other.clone() } else { text.clone() };
                let dir = dir.path();
                s.spawn(move || {
                    let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
                    let data = cfg.config().data.load().unwrap();
                    Run::new(&cfg, &data, dir).ranks(&mut comm).train().unwrap_err().to_string()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for e in &errors {
        assert!(e.contains("rank 2"), "{e}");
    }
    assert!(errors[2].contains("differs from rank 0's"), "{}", errors[2]);
    assert!(state::peek_meta(&RunFolder::new(dir.path()).state()).is_none(), "no step was taken");
}

/// A dataset that holds another rank's shard, or a shard of another subset, is refused before
/// anything is trained, saying what to pass.
#[test]
fn a_dataset_holding_another_shard_is_refused() {
    let text = &configs()[1].1;
    let cfg = TrainConfig::from_toml(text, &[]).unwrap().validate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (subset, rank) in [(EXAMPLES, 0), (0, 1)] {
        let data = cfg.config().data.load().unwrap().keep_shard(subset, 2, rank);
        let mut comm = InProcess::group(1).pop().unwrap();
        let e = Run::new(&cfg, &data, dir.path()).ranks(&mut comm).train().unwrap_err();
        assert!(e.to_string().contains("call keep_shard with this run's data.train_subset"), "{e}");
    }
}

/// The rows the run in `dir` has released: those in its record files and those its state
/// holds until the files catch up.
fn released(dir: &Path) -> Vec<dpgd::train::outputs::MetricsRow> {
    let folder = RunFolder::new(dir);
    let mut rows = if folder.metrics_jsonl().exists() { metrics(dir) } else { Vec::new() };
    if let Some(meta) = state::peek_meta(&folder.state()) {
        let have = rows.len();
        rows.extend(meta.unflushed.metrics.into_iter().filter(|r| r.step > have));
    }
    rows
}

/// The ledger of the run in `dir` (of config `text`), wherever its state says it is.
fn ledger(text: &str, dir: &Path) -> (usize, IndividualFilter) {
    let cfg = TrainConfig::from_toml(text, &[]).unwrap().validate().unwrap();
    let folder = RunFolder::new(dir);
    let expect = Expect { params: 7850, examples: EXAMPLES, max_steps: cfg.max_steps() };
    let snap = state::read(&folder.state(), expect).unwrap().expect("a state");
    let budget = snap.meta.budget;
    let at = (&snap.spent[..], snap.meta.ledger_ranks);
    let spent = shards::assemble(&folder, EXAMPLES, &(0..EXAMPLES), at, snap.meta.step, budget).unwrap();
    (snap.meta.step, IndividualFilter::from_spent(budget, spent).unwrap())
}

/// The steps the ledger shard files in `dir` are at.
fn shard_steps(dir: &Path) -> Vec<usize> {
    std::fs::read_dir(RunFolder::new(dir).confidential())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("ledger-"))
        .map(|p| u64::from_le_bytes(std::fs::read(p).unwrap()[8..16].try_into().unwrap()) as usize)
        .collect()
}

/// A rank killed at every phase of step 3 of a run on 2, 3 or 4 ranks — before its charges,
/// after them (durable) but before its partial sum is sent, after it is sent, before and after
/// rank 0's state — then the run resumed on every number of ranks from 1 to 4 and finished.
/// After the kill the ledger at the state's step is the uninterrupted run's at that step,
/// exactly, even where a shard is a step ahead (it gives its budgets from before that step's
/// charges; read from after them, that step was charged twice and the resumed run was another
/// run); at the end every publishable file is the uninterrupted run's, bit for bit.
#[test]
fn a_rank_killed_at_any_phase_of_a_step_resumes_bit_for_bit_on_any_number_of_ranks() {
    // Filtered GD with a noisy count every other step; no training-accuracy releases, so that
    // each step is one broadcast and one sum of each kind (after the greeting's broadcast).
    let text = &configs()[0].1.replace("[stopping]\nrule = \"best-train-accuracy\"\nevery = 2\nsigma = 20.0", "");
    let whole = tempfile::tempdir().unwrap();
    assert!(train_on(text, whole.path(), 1, None)[0].as_ref().unwrap().finished);
    let want = publishable(whole.path());
    let whole_rows = metrics(whole.path());
    // The uninterrupted run's ledger after steps 2 and 3 (the same seed: the same charges).
    let at_step = |m: usize| {
        let d = tempfile::tempdir().unwrap();
        common::train(text, d.path(), Some(m));
        ledger(text, d.path()).1
    };
    let (at2, at3) = (at_step(2), at_step(3));
    let step3 = (Op::Broadcast, 4); // the greeting, then steps 1, 2, 3
    for killed_on in 2..=4 {
        let last = killed_on - 1;
        // (phase, the rank killed, where, whether some shard is then a step ahead of the state)
        let phases = [
            ("rank 1 before its charges", 1, step3, false),
            ("rank 1 after its charges, before sending", 1, (Op::SumInts, 3), true),
            ("rank 1 after sending", 1, (Op::SumFloats, 3), true),
            ("rank 0 before its charges", 0, step3, false),
            ("rank 0 after the sums, before its state", 0, (Op::SumFloats, 3), true),
            ("rank 0 after its state and release", 0, (Op::Broadcast, 5), false),
            ("the last rank after the step", last, (Op::Broadcast, 5), false),
        ];
        for (phase, rank, at, ahead) in phases {
            for resume_on in 1..=4 {
                let what = format!("{phase} of {killed_on}, resumed on {resume_on}");
                let dir = tempfile::tempdir().unwrap();
                let outcomes = train_on(text, dir.path(), killed_on, Some((rank, at)));
                assert!(outcomes.iter().all(Result::is_err), "{what}: every rank stops");
                for (r, o) in outcomes.iter().enumerate() {
                    let e = o.as_ref().unwrap_err().to_string();
                    assert!(r == rank || e.contains(&format!("rank {rank} of {killed_on}")), "{what}: rank {r}: {e}");
                }
                let (m, after_kill) = ledger(text, dir.path());
                let released = released(dir.path()).len();
                assert_eq!(released, m, "{what}: the state holds every released row");
                assert!((2..=3).contains(&m), "{what}: the state is at step {m}");
                let now = if m == 2 { &at2 } else { &at3 };
                assert_eq!(after_kill.spent_all(), now.spent_all(), "{what}: the ledger at step {m}");
                assert_eq!(
                    shard_steps(dir.path()).contains(&(m + 1)),
                    ahead,
                    "{what}: shards {:?}",
                    shard_steps(dir.path())
                );
                let end = train_on(text, dir.path(), resume_on, None);
                assert!(end.iter().all(Result::is_ok), "{what}: {:?}", end.iter().find_map(|e| e.as_ref().err()));
                assert_eq!(metrics(dir.path())[..released], whole_rows[..released], "{what}: released rows changed");
                let got = publishable(dir.path());
                assert_eq!(got.len(), want.len(), "{what}");
                for ((f, a), (g, b)) in want.iter().zip(&got) {
                    assert_eq!(f, g);
                    assert!(a == b, "{what}: {} differs from the uninterrupted run's", f.display());
                }
            }
        }
    }
}
