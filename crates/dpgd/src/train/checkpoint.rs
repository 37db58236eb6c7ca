//! Durable training state, written atomically: to a temporary file, fsync'd, renamed over
//! the old file, and the directory fsync'd. A kill at any moment leaves either the old or
//! the new file, never a torn one; a checksum catches anything else.
//!
//! Two files live in a run's `checkpoint/` folder:
//! * `state.bin` — θ, the ledger and the step, every `checkpoint_every` steps (and, under the
//!   best-train-accuracy stopping rule, the best model so far, at every query);
//! * `ledger.bin` — the ledger alone, written every step *before* that step's noisy update
//!   is released. On resume the newer ledger wins, so the privacy spent by steps lost in a
//!   crash stays spent: a crash or a resume never lets an example exceed its budget.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"DPGDCKP1";

/// What a checkpoint records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Steps completed.
    pub step: usize,
    /// [`super::TrainConfig::privacy_hash`] of the run.
    pub config_hash: String,
    /// The ledger's per-example budget.
    pub budget: f64,
    /// The stopping rule's state, if it has answered a query.
    #[serde(default)]
    pub best: Option<Best>,
}

/// The best-train-accuracy stopping rule's state.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Best {
    /// The step whose model had the highest released (noisy) training accuracy.
    pub step: usize,
    /// That released accuracy.
    pub noisy_train_accuracy: f64,
    /// Queries answered since, without a new best.
    pub stale: usize,
}

/// A decoded checkpoint file.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Metadata.
    pub meta: Meta,
    /// Model parameters (empty in a ledger journal).
    pub theta: Vec<f32>,
    /// Parameters of the model at `meta.best` (empty if none).
    pub best_theta: Vec<f32>,
    /// Per-example spent budget.
    pub spent: Vec<f64>,
}

/// The full training state file of a run folder.
#[must_use]
pub fn state_path(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoint").join("state.bin")
}

/// The per-step ledger journal of a run folder.
#[must_use]
pub fn journal_path(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoint").join("ledger.bin")
}

/// Encodes and atomically writes a snapshot: θ, the best model so far (empty if none) and the
/// ledger.
pub fn write(path: &Path, meta: &Meta, theta: &[f32], best_theta: &[f32], spent: &[f64]) -> Result<()> {
    let meta_json = serde_json::to_vec(meta).expect("meta serialises");
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
    let digest = Sha256::digest(&buf);
    buf.extend_from_slice(&digest);
    atomic_write(path, &buf)
}

/// Reads a snapshot, or `None` if the file does not exist. A damaged file is an error.
pub fn read(path: &Path) -> Result<Option<Snapshot>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path)(e)),
    };
    decode(&bytes).map(Some).ok_or_else(|| Error::Checkpoint {
        path: path.into(),
        message: "the file is damaged (bad magic, length or checksum); it was not written by dpgd's atomic writer"
            .into(),
    })
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
    let nt = len(take(8)?)?;
    let theta = take(nt.checked_mul(4)?)?.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let ns = len(take(8)?)?;
    let spent = take(ns.checked_mul(8)?)?.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect();
    // Files written before the best-model section existed end here.
    let best_theta = match take(8) {
        None => Vec::new(),
        Some(b) => {
            let nb = len(b)?;
            take(nb.checked_mul(4)?)?.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
        }
    };
    if at != body.len() {
        return None;
    }
    Some(Snapshot { meta, theta, best_theta, spent })
}

/// Writes `bytes` to `path` so that a crash leaves either the old or the new content.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp).map_err(Error::io(&tmp))?;
        f.write_all(bytes).map_err(Error::io(&tmp))?;
        f.sync_all().map_err(Error::io(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(Error::io(path))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_detects_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.bin");
        assert_eq!(read(&path).unwrap(), None);
        let best = Best { step: 2, noisy_train_accuracy: 0.75, stale: 1 };
        let meta = Meta { step: 3, config_hash: "abc".into(), budget: 2.0, best: Some(best) };
        write(&path, &meta, &[1.0, -2.5], &[0.25, 4.0], &[0.5, 2.0, 0.0]).unwrap();
        let snap = read(&path).unwrap().unwrap();
        assert_eq!(snap.meta, meta);
        assert_eq!(snap.theta, vec![1.0, -2.5]);
        assert_eq!(snap.best_theta, vec![0.25, 4.0]);
        assert_eq!(snap.spent, vec![0.5, 2.0, 0.0]);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[20] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(read(&path).unwrap_err().to_string().contains("damaged"));
        std::fs::write(&path, &bytes[..30]).unwrap();
        assert!(read(&path).is_err());
    }
}
