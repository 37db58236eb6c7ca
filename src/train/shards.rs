//! The ledger of a data-parallel run, sharded beside its data: rank r of N keeps its examples'
//! spent budgets in `confidential/ledger-r-of-N.bin`, rewritten atomically after every step's
//! charges and before its partial sum is sent ([`write()`]). Rank 0's training state then records
//! which files hold the ledger (`Meta::ledger_ranks`), so at any instant every shard file is at
//! the state's step or one step ahead of it; behind is impossible by construction —
//! [`assemble`] refuses it as damage.
//!
//! **A resume is the same run.** A shard file holds its examples' spent budgets both before and
//! after its step's charges, so whichever of the two steps the state is at, [`assemble`] reads
//! the ledger exactly as it was then: a shard one step ahead (charged, its step never released)
//! gives its budgets from before that step, which the resumed run then charges once, as the
//! uninterrupted run did. Reading its after-budgets instead charged that step twice: the run
//! went on within budget but was another run (an example spent 1,820.10 where the uninterrupted
//! run spent 1,819.61, and dropped a step sooner).
//!
//! A resume on M ranks reads, for its own examples, the old shards that hold them ([`assemble`]):
//! any number of ranks resumes a run made on any other number, bit for bit. The run folder must
//! be on a file system every rank sees (as a cluster's home or scratch file system is).
//!
//! The file: magic; the step, the number of ranks, the rank, its first and end example (u64
//! each); the budget (f64); each example's spent budget before the step's charges, then after
//! them (f64 each); a SHA-256 of everything before. (Files of the first version hold the budgets
//! after the step only, read as before: at the state's step, or over-charged one step ahead.)

use std::ops::Range;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::folder::RunFolder;
use crate::collective::shard;
use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"DPGDLG02";
/// The first version's magic: the budgets after the step only.
const MAGIC_V1: &[u8; 8] = b"DPGDLG01";
const HEAD: usize = 8 + 5 * 8 + 8;

/// Rank `rank` of `ranks` and the examples it holds of `n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// The rank.
    pub rank: usize,
    /// The number of ranks.
    pub ranks: usize,
    /// Its examples ([`shard`]).
    pub range: Range<usize>,
}

impl Shard {
    /// Rank `rank` of `ranks`'s shard of `n` examples.
    #[must_use]
    pub fn of(n: usize, ranks: usize, rank: usize) -> Self {
        Self { rank, ranks, range: shard(n, ranks, rank) }
    }
}

/// Where rank `rank` of `ranks` keeps its shard of the ledger.
#[must_use]
pub fn path(folder: &RunFolder, rank: usize, ranks: usize) -> PathBuf {
    folder.confidential().join(format!("ledger-{rank}-of-{ranks}.bin"))
}

/// Writes `shard`'s spent budgets before step `step`'s charges (`before`) and after them
/// (`after`), atomically.
///
/// # Errors
/// If the file cannot be written; `before` or `after` not one value per example of the shard.
pub fn write(
    folder: &RunFolder,
    shard: &Shard,
    step: usize,
    budget: f64,
    (before, after): (&[f64], &[f64]),
) -> Result<()> {
    if before.len() != shard.range.len() || after.len() != shard.range.len() {
        return Err(Error::State(format!(
            "{} and {} spent budgets for a shard of {}",
            before.len(),
            after.len(),
            shard.range.len()
        )));
    }
    let mut buf = Vec::with_capacity(HEAD + 2 * after.len() * 8 + 32);
    buf.extend_from_slice(MAGIC);
    for v in [step, shard.ranks, shard.rank, shard.range.start, shard.range.end] {
        buf.extend_from_slice(&(v as u64).to_le_bytes());
    }
    buf.extend_from_slice(&budget.to_le_bytes());
    before.iter().chain(after).for_each(|v| buf.extend_from_slice(&v.to_le_bytes()));
    let digest = Sha256::digest(&buf);
    buf.extend_from_slice(&digest);
    crate::files::atomic_write(&path(folder, shard.rank, shard.ranks), &buf)
}

/// Reads `shard`'s file: its spent budgets at the state's step `at`, checked against the shard
/// and the `budget` (a shard behind the state, or more than one step ahead, is damage).
fn read(path: &Path, shard: &Shard, budget: f64, at: usize) -> Result<Vec<f64>> {
    let bad = |message: String| Error::RunState { path: path.into(), message };
    // The version from the magic alone: the length is checked before the file is read whole.
    let mut magic = [0u8; 8];
    let v1 = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok_and(|()| &magic == MAGIC_V1);
    let expected = HEAD + shard.range.len() * 8 * if v1 { 1 } else { 2 } + 32;
    let len = std::fs::metadata(path).map_err(Error::io(path))?.len();
    if len != expected as u64 {
        return Err(bad(format!(
            "{len} bytes, not the {expected} of rank {} of {}'s shard: it is damaged or not this run's; restore \
             it, or start the run again in a new folder",
            shard.rank, shard.ranks
        )));
    }
    let bytes = std::fs::read(path).map_err(Error::io(path))?;
    let (body, digest) = bytes.split_at(bytes.len() - 32);
    if (&body[..8] != MAGIC && &body[..8] != MAGIC_V1) || Sha256::digest(body).as_slice() != digest {
        return Err(bad("the file is damaged (bad magic or checksum): restore it, or start the run again".into()));
    }
    let word = |k: usize| u64::from_le_bytes(body[8 + 8 * k..16 + 8 * k].try_into().unwrap_or([0; 8]));
    let head = [word(1), word(2), word(3), word(4)].map(|v| usize::try_from(v).unwrap_or(usize::MAX));
    if head != [shard.ranks, shard.rank, shard.range.start, shard.range.end] {
        return Err(bad(format!(
            "it holds examples {}..{} as rank {} of {}, not {}..{} as rank {} of {}: not this run's shard",
            head[2], head[3], head[1], head[0], shard.range.start, shard.range.end, shard.rank, shard.ranks
        )));
    }
    let step = usize::try_from(word(0)).unwrap_or(usize::MAX);
    if step < at {
        return Err(bad(format!(
            "it holds the charges through step {step}, but the run's state is at step {at}: a shard is made \
             durable before its step is released, so the file is older than the run (restored from a backup?); \
             restore the current file, or start the run again"
        )));
    }
    if step > at + 1 && !v1 {
        return Err(bad(format!(
            "it holds the charges through step {step}, but the run's state is at step {at}: a shard is at most one \
             step ahead of the state, so the state is older than the run (restored from a backup?); restore the \
             current state, or start the run again"
        )));
    }
    let stored = f64::from_le_bytes(body[48..56].try_into().unwrap_or([0; 8]));
    if stored.to_bits() != budget.to_bits() {
        return Err(bad(format!("its per-example budget is {stored}, the run's {budget}: not this run's shard")));
    }
    // The budgets at the state's step: after the file's step, or (one step ahead) before it.
    let values = shard.range.len() * 8;
    let at_step = match (v1, step == at) {
        (true, _) | (false, true) => &body[body.len() - values..],
        (false, false) => &body[HEAD..HEAD + values],
    };
    let spent: Vec<f64> = at_step.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect();
    if let Some(i) = spent.iter().position(|s| !(s.is_finite() && *s >= 0.0 && *s <= budget)) {
        return Err(bad(format!(
            "example {} has spent {}, outside [0, {budget}]: damaged",
            shard.range.start + i,
            spent[i]
        )));
    }
    Ok(spent)
}

/// The spent budgets of examples `want` of a run of `n` examples at step `step`, from where
/// its state says the ledger is: the state's own ledger (`in_state`, one value per example), or
/// the shard files of `ranks` ranks, each at step `step` or one step ahead (then read from
/// before that step's charges): exactly the ledger at step `step`.
///
/// # Errors
/// A shard file that is missing, damaged, of another run, or behind the state (named).
pub fn assemble(
    folder: &RunFolder,
    n: usize,
    want: &Range<usize>,
    (in_state, ranks): (&[f64], Option<usize>),
    step: usize,
    budget: f64,
) -> Result<Vec<f64>> {
    let Some(ranks) = ranks else {
        return in_state.get(want.clone()).map(<[f64]>::to_vec).ok_or_else(|| {
            Error::State(format!("the state's ledger has {} entries for {n} examples", in_state.len()))
        });
    };
    let mut out = Vec::with_capacity(want.len());
    for rank in 0..ranks {
        let old = Shard::of(n, ranks, rank);
        let (lo, hi) = (old.range.start.max(want.start), old.range.end.min(want.end));
        if lo >= hi {
            continue;
        }
        let spent = read(&path(folder, rank, ranks), &old, budget, step)?;
        out.extend_from_slice(&spent[lo - old.range.start..hi - old.range.start]);
    }
    Ok(out)
}

/// Removes the ledger shards of any number of ranks but `keep` (none: the state holds the
/// ledger), once the state no longer points at them.
pub fn remove_others(folder: &RunFolder, keep: Option<usize>) {
    let Ok(entries) = std::fs::read_dir(folder.confidential()) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(ranks) = name.strip_prefix("ledger-").and_then(|r| r.strip_suffix(".bin")) else { continue };
        let of = ranks.split_once("-of-").and_then(|(_, n)| n.parse::<usize>().ok());
        if of.is_some() && of != keep {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Byte mutations of a valid shard file: an error naming the file, or the shard's
        /// values within its budget; never a panic.
        #[test]
        fn mutated_shards_never_panic(flips in proptest::collection::vec((0usize..200, any::<u8>()), 1..6), cut in 1usize..200) {
            let dir = tempfile::tempdir().unwrap();
            let folder = RunFolder::new(dir.path());
            let s = Shard::of(9, 2, 1);
            write(&folder, &s, 3, 4.0, (&[0.0, 1.0, 3.0, 0.0, 2.0], &[0.5, 1.0, 4.0, 0.0, 2.5])).unwrap();
            let p = path(&folder, 1, 2);
            let mut bytes = std::fs::read(&p).unwrap();
            for (at, v) in flips {
                let i = at % bytes.len();
                bytes[i] = v;
            }
            bytes.truncate(cut.min(bytes.len()));
            std::fs::write(&p, &bytes).unwrap();
            match read(&p, &s, 4.0, 3) {
                Ok(spent) => prop_assert!(spent.len() == 5 && spent.iter().all(|v| (0.0..=4.0).contains(v))),
                Err(e) => prop_assert!(e.to_string().contains("ledger-1-of-2.bin"), "{}", e),
            }
        }
    }

    /// Shards at the state's step (5) and one step ahead (6) give the ledger at step 5: the
    /// one ahead its budgets from before its step's charges.
    #[test]
    fn shards_written_on_three_ranks_are_read_back_on_two() {
        let dir = tempfile::tempdir().unwrap();
        let folder = RunFolder::new(dir.path());
        let n = 10;
        let all: Vec<f64> = (0..n).map(|i| i as f64 / 4.0).collect();
        let ahead: Vec<f64> = all.iter().map(|v| v + 0.5).collect();
        for rank in 0..3 {
            let s = Shard::of(n, 3, rank);
            let r = s.range.clone();
            let step = 5 + rank % 2;
            let (before, after) = if step == 5 { (&ahead[r.clone()], &all[r]) } else { (&all[r.clone()], &ahead[r]) };
            write(&folder, &s, step, 4.0, (before, after)).unwrap();
        }
        for rank in 0..2 {
            let s = Shard::of(n, 2, rank);
            let got = assemble(&folder, n, &s.range, (&[], Some(3)), 5, 4.0).unwrap();
            assert_eq!(got, all[s.range.clone()]);
        }
        // A shard two steps ahead of the state: refused.
        let e = assemble(&folder, n, &(0..n), (&[], Some(3)), 4, 4.0).unwrap_err().to_string();
        assert!(e.contains("ledger-1-of-3.bin") && e.contains("at most one step ahead"), "{e}");
        assert_eq!(assemble(&folder, n, &(3..7), (&all, None), 5, 4.0).unwrap(), all[3..7]);
        // Behind the state: refused, naming the file.
        let e = assemble(&folder, n, &(0..n), (&[], Some(3)), 6, 4.0).unwrap_err().to_string();
        assert!(e.contains("ledger-0-of-3.bin") && e.contains("through step 5"), "{e}");
        // Another budget, a flipped byte, a missing file.
        let e = assemble(&folder, n, &(0..n), (&[], Some(3)), 5, 3.0).unwrap_err().to_string();
        assert!(e.contains("budget"), "{e}");
        let p = path(&folder, 1, 3);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[60] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        let e = assemble(&folder, n, &(0..n), (&[], Some(3)), 5, 4.0).unwrap_err().to_string();
        assert!(e.contains("damaged") && e.contains("ledger-1-of-3.bin"), "{e}");
        remove_others(&folder, Some(2));
        assert!(!p.exists());
    }
}
