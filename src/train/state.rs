//! The durable training state of a run, written atomically every step — after the step's
//! ledger charges, noisy update and noisy releases are computed, before any of them leaves the
//! process — so a crash at any instant leaves either the previous step's state or this one's,
//! with every value already shown held in it, and a resume from it reproduces the
//! uninterrupted run (see [`super::Trainer`]).
//!
//! The file (`confidential/state.bin`) holds the step, the run's identity (its configuration
//! and the SHA-256 of its data files), θ, every example's spent budget, the stopping rule's
//! state and best model, the momentum buffer and a correlated-noise method's last noise vectors
//! (each only when there is one), followed by a SHA-256 of everything before it. It is input like any
//! other: [`read`] checks the checksum, every length against what the resuming run needs, and
//! every value's range, and names the file in every error.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::outputs::{ConfidentialRow, MetricsRow};
use super::stopping::StoppingState;
use crate::data::Fingerprint;
use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"DPGDST02";

/// What identifies a run: a resume must match it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunIdentity {
    /// [`super::TrainConfig::identity`], as JSON.
    pub config: serde_json::Value,
    /// The data files' fingerprints (training images and labels, test images and labels).
    pub data: Vec<Fingerprint>,
    /// Training examples used (after `data.train_subset`).
    pub examples: usize,
    /// Model parameters.
    pub params: usize,
    /// The engine that computes the run (`the fast CPU engine`, `the burn engine`): θ's layout
    /// is the engine's, so a resume must use the same one (absent in states written before it
    /// was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
}

/// The state's metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Steps completed (their updates are in θ and their charges in the ledger).
    pub step: usize,
    /// The run's identity.
    pub identity: RunIdentity,
    /// The ledger's per-example budget B_norm.
    pub budget: f64,
    /// The stopping rule's state after the releases of steps `1..=step`.
    pub stopping: StoppingState,
    /// What computing step `step` cost (confidential).
    #[serde(default)]
    pub cost: StepCost,
    /// Released rows not yet in the record files (the files are rewritten about once a second,
    /// not every step), always including step `step`'s own: durable here before they are
    /// shown anywhere, so a crash loses none and a resume never draws a released value again.
    #[serde(default, skip_serializing_if = "Unflushed::is_empty")]
    pub unflushed: Unflushed,
    /// Whether the state holds its own step's releases (false in states written by dpgd
    /// versions that released a step's values before making them durable: such a run cannot
    /// be resumed without drawing a shown value again).
    #[serde(default)]
    pub releases_in_state: bool,
    /// Where the ledger is: `None` in this file (one value per example); `Some(N)` in the shard
    /// files of a run on N ranks ([`super::shards`]), each at this step or one ahead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger_ranks: Option<usize>,
    /// A one-run audit's canaries (`[audit]`): their coordinates, ledger and coins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canaries: Option<super::canaries::CanaryState>,
}

/// The most ranks a run's ledger may be sharded over.
pub const MAX_RANKS: usize = 1 << 20;

/// Released and confidential rows written with the state until the record files catch up.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Unflushed {
    /// Released rows, in step order.
    pub metrics: Vec<MetricsRow>,
    /// Their confidential rows.
    pub confidential: Vec<ConfidentialRow>,
}

impl Unflushed {
    fn is_empty(&self) -> bool {
        self.metrics.is_empty() && self.confidential.is_empty()
    }
}

/// What computing one step cost (confidential: exact counts and losses, and time).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct StepCost {
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Examples whose gradient was computed.
    pub computed: usize,
    /// Of those, skipped for a non-finite gradient.
    pub skipped: usize,
    /// Σ of the computed examples' losses.
    pub loss_sum: f64,
}

/// A decoded state file.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Metadata.
    pub meta: Meta,
    /// Model parameters after `meta.step` steps.
    pub theta: Vec<f32>,
    /// Parameters of the stopping rule's best model (empty if none).
    pub best_theta: Vec<f32>,
    /// Per-example spent budget.
    pub spent: Vec<f64>,
    /// The momentum buffer v (`train.momentum`; empty without momentum, and in files written
    /// before it existed).
    pub velocity: Vec<f32>,
    /// The noise a correlated-noise method carries into the next step (BandMF's last b − 1
    /// noise vectors, newest first, each over θ and an audit's canaries; empty for others).
    /// With it the state can denoise the released iterates: it is confidential, as the file is.
    pub noise: Vec<f64>,
}

/// Encodes a snapshot and writes it atomically to `path`.
///
/// # Errors
/// If the file cannot be written.
pub fn write(
    path: &Path,
    meta: &Meta,
    theta: &[f32],
    best_theta: &[f32],
    spent: &[f64],
    (velocity, noise): (&[f32], &[f64]),
) -> Result<()> {
    let meta_json = serde_json::to_vec(meta).map_err(Error::serialise("the state's metadata"))?;
    let mut buf = Vec::with_capacity(64 + meta_json.len() + (theta.len() + best_theta.len()) * 4 + spent.len() * 8);
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&(meta_json.len() as u64).to_le_bytes());
    buf.extend_from_slice(&meta_json);
    buf.extend_from_slice(&(theta.len() as u64).to_le_bytes());
    theta.iter().for_each(|v| buf.extend_from_slice(&v.to_le_bytes()));
    buf.extend_from_slice(&(spent.len() as u64).to_le_bytes());
    spent.iter().for_each(|v| buf.extend_from_slice(&v.to_le_bytes()));
    buf.extend_from_slice(&(best_theta.len() as u64).to_le_bytes());
    best_theta.iter().for_each(|v| buf.extend_from_slice(&v.to_le_bytes()));
    // The momentum buffer, only when there is one (or noise follows): files without either keep
    // their old form. Then the noise, only when there is some.
    if !velocity.is_empty() || !noise.is_empty() {
        buf.extend_from_slice(&(velocity.len() as u64).to_le_bytes());
        velocity.iter().for_each(|v| buf.extend_from_slice(&v.to_le_bytes()));
    }
    if !noise.is_empty() {
        buf.extend_from_slice(&(noise.len() as u64).to_le_bytes());
        noise.iter().for_each(|v| buf.extend_from_slice(&v.to_le_bytes()));
    }
    let digest = Sha256::digest(&buf);
    buf.extend_from_slice(&digest);
    atomic_write(path, &buf)
}

/// The most earlier steps' noise a state holds (BandMF's b − 1).
const NOISE_STEPS: u64 = super::method::MAX_BANDS as u64 - 1;
/// The most canaries whose coordinates the noise covers (`audit.canaries`).
const NOISE_CANARIES: u64 = super::config::MAX_CANARIES as u64;

/// What a resuming run expects of a state file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    /// Parameters of the model.
    pub params: usize,
    /// Training examples.
    pub examples: usize,
    /// The run's last step.
    pub max_steps: usize,
}

impl Expect {
    /// The largest file a state for these sizes can be (θ, the best θ and the momentum buffer;
    /// the noise of the most earlier steps BandMF keeps, over θ and the most canaries; metadata
    /// up to 1 MiB).
    fn max_bytes(&self) -> u64 {
        let noise = (self.params as u64).saturating_add(NOISE_CANARIES).saturating_mul(NOISE_STEPS * 8);
        (self.params as u64)
            .saturating_mul(12)
            .saturating_add((self.examples as u64).saturating_mul(8))
            .saturating_add(noise)
            .saturating_add(1 << 20)
    }
}

/// Reads the state at `path`, or `None` if there is none.
///
/// # Errors
/// [`Error::RunState`] naming the file: damaged (bad magic, length or checksum), larger than a
/// state of this run can be, or inconsistent with `expect` (θ, ledger or step out of range).
pub fn read(path: &Path, expect: Expect) -> Result<Option<Snapshot>> {
    let bad = |message: String| Error::RunState { path: path.into(), message };
    let len = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path)(e)),
    };
    if len > expect.max_bytes() {
        return Err(bad(format!(
            "{len} bytes, more than a state of this run ({} parameters, {} examples) can be: it is not this run's state",
            expect.params, expect.examples
        )));
    }
    let bytes = std::fs::read(path).map_err(Error::io(path))?;
    let snap = decode(&bytes).ok_or_else(|| {
        bad("the file is damaged (bad magic, length or checksum); it was not written by dpgd's atomic writer. \
             Delete the run folder to start the run again"
            .into())
    })?;
    let m = &snap.meta;
    let problems = [
        (
            snap.theta.len() != expect.params,
            format!("θ has {} values for a model of {} parameters", snap.theta.len(), expect.params),
        ),
        (
            m.ledger_ranks.is_none() && snap.spent.len() != expect.examples,
            format!("the ledger has {} entries for {} training examples", snap.spent.len(), expect.examples),
        ),
        (
            m.ledger_ranks.is_some_and(|r| r == 0 || r > MAX_RANKS)
                || (m.ledger_ranks.is_some() && !snap.spent.is_empty()),
            format!(
                "it says its ledger is sharded over {:?} ranks and holds {} entries",
                m.ledger_ranks,
                snap.spent.len()
            ),
        ),
        (
            !snap.best_theta.is_empty() && snap.best_theta.len() != expect.params,
            format!("the best model has {} values for {} parameters", snap.best_theta.len(), expect.params),
        ),
        (
            !snap.velocity.is_empty() && snap.velocity.len() != expect.params,
            format!("the momentum buffer has {} values for {} parameters", snap.velocity.len(), expect.params),
        ),
        (
            m.step == 0 || m.step > expect.max_steps,
            format!("it claims step {} of a run of {} steps", m.step, expect.max_steps),
        ),
        (m.budget.is_nan() || m.budget <= 0.0, format!("its per-example budget {} is not positive", m.budget)),
        (snap.noise.iter().any(|x| !x.is_finite()), "its saved noise holds a value that is not finite".into()),
    ];
    if let Some((_, why)) = problems.into_iter().find(|(bad, _)| *bad) {
        return Err(bad(format!("{why}; it belongs to another run or is corrupt")));
    }
    Ok(Some(snap))
}

/// The metadata of the state at `path`, read without checking the rest of the file: only for
/// explaining why a state does not fit a run (its identity), never for resuming.
#[must_use]
pub fn peek_meta(path: &Path) -> Option<Meta> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut head = [0u8; 16];
    f.read_exact(&mut head).ok()?;
    if &head[..8] != MAGIC {
        return None;
    }
    let len = u64::from_le_bytes(head[8..16].try_into().ok()?);
    if len > 1 << 20 {
        return None;
    }
    let mut meta = vec![0u8; len as usize];
    f.read_exact(&mut meta).ok()?;
    serde_json::from_slice(&meta).ok()
}

fn decode(bytes: &[u8]) -> Option<Snapshot> {
    if bytes.len() < MAGIC.len() + 32 || &bytes[..8] != MAGIC {
        return None;
    }
    let (body, digest) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(body).as_slice() != digest {
        return None;
    }
    let mut at: usize = 8;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = body.get(at..at.checked_add(n)?)?;
        at += n;
        Some(s)
    };
    let len = |b: &[u8]| usize::try_from(u64::from_le_bytes(b.try_into().ok()?)).ok();
    let meta_len = len(take(8)?)?;
    let meta: Meta = serde_json::from_slice(take(meta_len)?).ok()?;
    // `take` checks every length against the bytes actually present before anything is allocated.
    let nt = len(take(8)?)?;
    let theta = floats(take(nt.checked_mul(4)?)?);
    let ns = len(take(8)?)?;
    let spent = doubles(take(ns.checked_mul(8)?)?);
    let nb = len(take(8)?)?;
    let best_theta = floats(take(nb.checked_mul(4)?)?);
    // The momentum buffer, if any (nothing left: none; a partial length is caught below), then
    // the noise, if any.
    let velocity = match take(8) {
        None => Vec::new(),
        Some(b) => floats(take(len(b)?.checked_mul(4)?)?),
    };
    let noise = match take(8) {
        None => Vec::new(),
        Some(b) => doubles(take(len(b)?.checked_mul(8)?)?),
    };
    if at != body.len() {
        return None;
    }
    Some(Snapshot { meta, theta, best_theta, spent, velocity, noise })
}

fn doubles(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

pub use crate::files::atomic_write;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::stopping::Best;
    use proptest::prelude::*;

    fn meta(step: usize) -> Meta {
        let identity = RunIdentity {
            config: serde_json::json!({"a": 1}),
            data: vec![],
            examples: 3,
            params: 2,
            engine: Some("the fast CPU engine".into()),
        };
        let best = Some(Best { step: 2, noisy_train_accuracy: 0.75, stale: 1 });
        Meta {
            canaries: None,
            step,
            identity,
            budget: 2.0,
            stopping: StoppingState { best },
            cost: StepCost::default(),
            unflushed: Unflushed::default(),
            releases_in_state: true,
            ledger_ranks: None,
        }
    }

    const EXPECT: Expect = Expect { params: 2, examples: 3, max_steps: 10 };

    #[test]
    fn round_trips_and_detects_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.bin");
        assert_eq!(read(&path, EXPECT).unwrap(), None);
        // Without a momentum buffer (the file's old form) and with one, each with and without
        // noise.
        let noises = [vec![], vec![1.5, -2.25, 3.0, 0.5]];
        for (velocity, noise) in
            [vec![], vec![0.125, -3.0]].into_iter().flat_map(|v| noises.clone().map(|n| (v.clone(), n)))
        {
            write(&path, &meta(3), &[1.0, -2.5], &[0.25, 4.0], &[0.5, 2.0, 0.0], (&velocity, &noise)).unwrap();
            let snap = read(&path, EXPECT).unwrap().unwrap();
            assert_eq!(snap.meta, meta(3));
            assert_eq!(
                (snap.theta, snap.best_theta, snap.spent),
                (vec![1.0, -2.5], vec![0.25, 4.0], vec![0.5, 2.0, 0.0])
            );
            assert_eq!((snap.velocity, snap.noise), (velocity, noise));
        }
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[20] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let e = read(&path, EXPECT).unwrap_err().to_string();
        assert!(e.contains("damaged") && e.contains("state.bin"), "{e}");
    }

    #[test]
    fn valid_files_of_another_shape_are_refused_naming_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.bin");
        for (m, theta, spent, velocity, want) in [
            (meta(3), vec![1.0; 5], vec![0.0; 3], vec![], "θ has 5 values"),
            (meta(3), vec![1.0; 2], vec![0.0; 4], vec![], "ledger has 4 entries"),
            (meta(3), vec![1.0; 2], vec![0.0; 3], vec![1.0; 3], "momentum buffer has 3 values"),
            (meta(1_000_000_000_000_000_000), vec![1.0; 2], vec![0.0; 3], vec![], "claims step"),
        ] {
            write(&path, &m, &theta, &[], &spent, (&velocity, &[])).unwrap();
            let e = read(&path, EXPECT).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("state.bin"), "{e}");
        }
        write(&path, &meta(3), &[1.0; 2], &[], &[0.0; 3], (&[], &[1.0, f64::NAN])).unwrap();
        let e = read(&path, EXPECT).unwrap_err().to_string();
        assert!(e.contains("not finite") && e.contains("state.bin"), "{e}");
    }

    proptest! {
        /// Byte-level mutations of a valid state: an error or a state within the expected
        /// shape, never a panic or an allocation beyond the file.
        #[test]
        fn mutated_states_never_panic(flips in proptest::collection::vec((0usize..400, any::<u8>()), 1..8), cut in 1usize..400) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("state.bin");
            write(&path, &meta(3), &[1.0, -2.5], &[0.25, 4.0], &[0.5, 2.0, 0.0], (&[0.5, 0.25], &[1.0, -1.0])).unwrap();
            let mut bytes = std::fs::read(&path).unwrap();
            for (at, v) in flips {
                let i = at % bytes.len();
                bytes[i] = v;
            }
            bytes.truncate(cut.min(bytes.len()));
            std::fs::write(&path, &bytes).unwrap();
            if let Ok(Some(s)) = read(&path, EXPECT) {
                prop_assert_eq!((s.theta.len(), s.spent.len()), (2, 3));
                prop_assert!(s.velocity.is_empty() || s.velocity.len() == 2);
            }
        }

        /// Mutations with a re-computed checksum (a state written by a buggy or hostile tool):
        /// still an error or a consistent state, never a panic.
        #[test]
        fn resealed_mutations_never_panic(flips in proptest::collection::vec((8usize..400, any::<u8>()), 1..8)) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("state.bin");
            write(&path, &meta(3), &[1.0, -2.5], &[0.25, 4.0], &[0.5, 2.0, 0.0], (&[0.5, 0.25], &[1.0, -1.0])).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            let mut body = bytes[..bytes.len() - 32].to_vec();
            for (at, v) in flips {
                let i = at % body.len();
                body[i] = v;
            }
            let digest = Sha256::digest(&body);
            body.extend_from_slice(&digest);
            std::fs::write(&path, &body).unwrap();
            if let Ok(Some(s)) = read(&path, EXPECT) {
                prop_assert_eq!((s.theta.len(), s.spent.len()), (2, 3));
                prop_assert!(s.velocity.is_empty() || s.velocity.len() == 2);
            }
        }
    }
}
