//! Personalized privacy (`[privacy.budgets]`): every training example its own budget, one of a
//! few public tiers, enforced by the per-example ledger that already stops each example when
//! its budget is spent.
//!
//! **The guarantee, per example.** The individual filter bounds example i's privacy loss by
//! what its own ledger lets it spend ([FZ21] Thm 4.5 for Rényi DP; for full-batch GD the
//! Gaussian-DP filter of [KTH23] on [ST22]'s fully adaptive composition): its proof is per
//! example, so a budget per example needs no new theorem. The noise σ is calibrated for
//! `privacy.epsilon` at `privacy.worst_case_steps` = k, exactly as a run without tiers (usually
//! the strictest tier's ε; calibrated for a looser one, the stricter tiers stop sooner); each
//! tier ε_j gets the largest budget whose guarantee — training at that budget, composed with
//! every noisy count the run releases (each charged to every example) — converts to at most
//! ε_j by the run's own conversion (the method computes it:
//! [`crate::train::method::RunAccounting::tiers`]). So example i is (ε_{tier(i)}, δ)-DP with
//! respect to its own zero-out (or replace-one, where the method supports it), in the sense of
//! personalized DP (Jorgensen, Yu & Cormode 2015, "Conservative or liberal? Personalized
//! differential privacy", ICDE 2015).
//!
//! **The assumption.** As in personalized DP, the budget assignment is the individuals' own
//! public choice, not their data: the guarantee holds against an adversary who knows which
//! example holds which tier, and neighbouring datasets keep every example's tier. dpgd never
//! publishes the assignment, nor any exact count of how many examples hold a tier; the
//! confidential budget report shows each tier's spending to the data owner. A released noisy
//! active count does reveal tier sizes approximately — a strict tier's examples all stop at its
//! budget, and the count falls by about their number (a 600-example tier of 1,400 stopping at
//! step 2 shows as a count near 800) — which the assumption allows (the assignment is public)
//! but which a data owner who wants tier sizes kept quiet should not release
//! (`release.active_count = "none"`).
//!
//! **Identity.** An example's tier is its own row's: the assignment is read for the rows of the
//! training file the run takes, and a hold-out (a private search's validation split) keeps each
//! example's row ([`BudgetsConfig::assignment_by_row`]); rank shards slice it by position.
//!
//! [FZ21]: https://arxiv.org/abs/2008.11193
//! [KTH23]: https://arxiv.org/abs/2209.15596
//! [ST22]: https://arxiv.org/abs/2210.17520

use std::path::Path;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use super::config::{BudgetsConfig, DataConfig, Method, typed_down};
use crate::accounting::filter::Budgets;
use crate::error::{Error, Result};

/// One tier of personalized budgets, as `privacy.json` publishes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tier {
    /// The ε its examples asked for (`privacy.budgets.epsilons`, read down to the decimal).
    pub epsilon: f64,
    /// The ε its guarantee reaches at the run's δ, rounded up: at most `epsilon`.
    pub guaranteed_epsilon: f64,
    /// Each of its examples' budget in the ledger's units.
    pub budget: f64,
    /// Full-batch GD: the budget in worst-case steps, budget = steps·C² (an example of this
    /// tier at full gradient norm trains this many steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worst_case_steps: Option<u64>,
}

impl BudgetsConfig {
    /// The checks of `[privacy.budgets]` for a run of `method` on `data`.
    ///
    /// # Errors
    /// A method without a ledger that stops examples, no tiers or more than 256, a tier that is
    /// not a positive number or given twice, not exactly one of `file`, `column` and `shares`, a
    /// column that `data.ignore_columns` does not skip, or shares that are not one per tier,
    /// each in [0, 1], adding up to 1 (each named).
    pub fn check(&self, method: Method, data: &DataConfig) -> Result<()> {
        let f = |name: &str, why: String| Err(Error::config(format!("privacy.budgets.{name}"), why));
        if !method.training().drops_exhausted_examples() {
            return Err(Error::config(
                "privacy.budgets",
                format!(
                    "method = \"{}\" keeps no per-example ledger that stops an example when its budget is spent, so \
                     it cannot give examples budgets of their own: use method = {}",
                    method.name(),
                    Method::those_that(|m| m.drops_exhausted_examples())
                ),
            ));
        }
        let e = &self.epsilons;
        if e.is_empty() || e.len() > Budgets::MAX_TIERS {
            return f("epsilons", format!("{} tiers: give 1 to 256, e.g. epsilons = [1, 2, 3]", e.len()));
        }
        if let Some(bad) = e.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
            return f("epsilons", format!("{bad} is not a positive epsilon"));
        }
        if let Some((i, x)) = e.iter().enumerate().find(|(i, x)| e[..*i].contains(x)) {
            return f(
                "epsilons",
                format!(
                    "{x} is given twice (at positions {} and {})",
                    e.iter().position(|y| y == x).unwrap_or(0) + 1,
                    i + 1
                ),
            );
        }
        if let Some(s) = &self.search_epsilons
            && (s.len() != e.len() || s.iter().zip(e).any(|(c, t)| !(c.is_finite() && *c > 0.0 && c <= t)))
        {
            return f(
                "search_epsilons",
                format!(
                    "{s:?} for the tiers {e:?}: a private search sets one per tier, positive and at most the tier's \
                     epsilon; remove it (it is not set by hand)"
                ),
            );
        }
        let sources = [self.file.is_some(), self.column.is_some(), self.shares.is_some()];
        if sources.iter().filter(|&&s| s).count() > 1 {
            return f("file", "give one of file, column and shares".into());
        }
        if let Some(c) = &self.column
            && !data.ignore_columns.contains(c)
        {
            return Err(Error::config(
                "data.ignore_columns",
                format!("add \"{c}\" (privacy.budgets.column), or each example's budget is trained on as a feature"),
            ));
        }
        match (&self.file, &self.shares) {
            (None, None) if self.column.is_none() => f(
                "file",
                "say which example holds which budget: file = \"budgets.csv\" (one epsilon per training example), \
                 column = \"...\" (a column of a CSV dataset), or shares = [...] for a random assignment"
                    .into(),
            ),
            (None, Some(s)) if s.len() != e.len() => {
                f("shares", format!("{} shares for {} tiers: give one share per epsilon", s.len(), e.len()))
            }
            (None, Some(s)) if s.iter().any(|x| !(0.0..=1.0).contains(x)) => {
                f("shares", "each share must be in [0, 1]".into())
            }
            (None, Some(s)) if (s.iter().sum::<f64>() - 1.0).abs() > 1e-9 => {
                f("shares", format!("the shares add up to {}, not 1", s.iter().sum::<f64>()))
            }
            (_, None) if self.seed != 0 => f("seed", "a seed only draws a random assignment (shares)".into()),
            _ => Ok(()),
        }
    }

    /// The ε each tier's budget is calibrated for: the tiers' own (or, in a private search's
    /// candidate, [`search_epsilons`](Self::search_epsilons)), each read down to the decimal
    /// typed (so a tier's guarantee is at most the typed value exactly).
    #[must_use]
    pub fn targets(&self) -> Vec<f64> {
        self.search_epsilons.as_ref().unwrap_or(&self.epsilons).iter().map(|&e| typed_down(e)).collect()
    }

    /// Each of the first `n` training examples of `data` its tier (an index into `epsilons`):
    /// read from `file` or from the training CSV's `column` (one value per example of the
    /// training file, all of them; with `data.train_subset`, at least `n`), or drawn from
    /// `seed` in the proportions `shares`.
    ///
    /// # Errors
    /// An unreadable file, or one whose length, values or tiers are wrong (naming the file,
    /// line and value).
    fn assignment(&self, data: &DataConfig, n: usize) -> Result<Vec<u8>> {
        let subset = data.train_subset > 0;
        match (&self.file, &self.column, &self.shares) {
            (Some(path), _, _) => read(path, &self.epsilons, n, subset),
            (None, Some(column), _) => {
                read_column(&data.dir.join(crate::data::csv::FILES[0]), column, &self.epsilons, n, subset)
            }
            (None, None, Some(shares)) => Ok(draw(shares, n, self.seed)),
            (None, None, None) => Err(Error::config("privacy.budgets.file", "no assignment given")),
        }
    }
}

impl BudgetsConfig {
    /// Each of the run's `n` training examples its tier, keyed by its original row of the
    /// training file: with `data.hold_out` (a private search's validation split too) the run
    /// trains on the first `n + held` rows without the held-out ones, and example i takes the
    /// tier of its own row ([`HoldOut::kept_rows`](crate::data::HoldOut::kept_rows)), never
    /// the next person's; a random assignment (`shares`) is drawn over those rows too, so an
    /// example's tier is the same with and without a hold-out. Rank shards slice this vector
    /// by position.
    ///
    /// # Errors
    /// A file or column that is unreadable, or whose length, values or tiers are wrong (naming
    /// the file, line and value); a hold-out that leaves nothing to train on.
    pub fn assignment_by_row(&self, data: &DataConfig, n: usize) -> Result<Vec<u8>> {
        let Some(h) = &data.hold_out else { return self.assignment(data, n) };
        let total = n.checked_add(h.examples).ok_or_else(|| Error::config("data.hold_out.examples", "too many"))?;
        let rows = h.kept_rows(total)?;
        let all = self.assignment(data, total)?;
        Ok(rows.iter().map(|&r| all[r]).collect())
    }
}

/// The most bytes a line of a budget file may take on average: a 20-digit decimal and its newline
/// fit in far less.
const BYTES_PER_LINE: u64 = 64;

fn read(path: &Path, tiers: &[f64], n: usize, subset: bool) -> Result<Vec<u8>> {
    let len = std::fs::metadata(path).map_err(Error::io(path))?.len();
    let most = (n as u64).saturating_add(1).saturating_mul(BYTES_PER_LINE).saturating_add(1024);
    if len > most && !subset {
        return Err(Error::Data {
            path: path.into(),
            message: format!(
                "{len} bytes for {n} training examples: a budget file holds one epsilon per line, one line per example"
            ),
        });
    }
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    let mut lines = text.lines().enumerate().peekable();
    if lines.peek().is_some_and(|(_, l)| l.trim().eq_ignore_ascii_case("epsilon")) {
        lines.next();
    }
    tiers_of(path, lines.map(|(k, l)| (k as u64 + 1, l.trim())), tiers, n, subset)
}

/// The tiers in `column` of the training CSV `path`.
fn read_column(path: &Path, column: &str, tiers: &[f64], n: usize, subset: bool) -> Result<Vec<u8>> {
    let bad = |message: String| Error::Data { path: path.into(), message };
    let bytes = std::fs::read(path).map_err(Error::io(path))?;
    let mut reader = ::csv::ReaderBuilder::new().has_headers(true).trim(::csv::Trim::All).from_reader(bytes.as_slice());
    let headers = reader.headers().map_err(|e| bad(format!("no readable header row ({e})")))?.clone();
    let at = headers.iter().position(|h| h == column).ok_or_else(|| {
        bad(format!("no column `{column}` (privacy.budgets.column) among {:?}", headers.iter().collect::<Vec<_>>()))
    })?;
    let mut cells = Vec::new();
    let lines = crate::data::csv::Lines::new(&bytes);
    for record in reader.records() {
        let record = record.map_err(|e| bad(format!("line {}: unreadable row: {e}", lines.line(e.position()))))?;
        let line = lines.line(record.position());
        cells.push((line, record.get(at).unwrap_or("").to_string()));
    }
    tiers_of(path, cells.iter().map(|(l, c)| (*l, c.as_str())), tiers, n, subset)
}

/// Each `(line, cell)`'s tier: a positive number, one of `tiers`; `n` of them (with `subset`,
/// the first `n` of at least `n`).
fn tiers_of<'c>(
    path: &Path,
    cells: impl Iterator<Item = (u64, &'c str)>,
    tiers: &[f64],
    n: usize,
    subset: bool,
) -> Result<Vec<u8>> {
    let bad = |message: String| Error::Data { path: path.into(), message };
    let mut out = Vec::with_capacity(n.min(1 << 24));
    for (line, cell) in cells {
        let at = |why: String| bad(format!("line {line}: `{cell}` {why}"));
        let eps: f64 = cell.parse().map_err(|_| at("is not a number: give one epsilon per example".into()))?;
        if !(eps.is_finite() && eps > 0.0) {
            return Err(at("is not a positive epsilon".into()));
        }
        let tier = tiers.iter().position(|&t| t == eps).ok_or_else(|| {
            at(format!(
                "is not one of privacy.budgets.epsilons {tiers:?}: each example's budget must be one of the declared \
                 tiers (the tiers are what privacy.json publishes)"
            ))
        })?;
        if out.len() == n {
            if subset {
                break;
            }
            return Err(bad(format!("more than the {n} training examples: one epsilon per example, in order")));
        }
        out.push(u8::try_from(tier).map_err(|_| at("is past the 256th tier".into()))?);
    }
    if out.len() < n {
        return Err(bad(format!(
            "{} epsilons for {n} training examples: give one per example, in the order of the training file",
            out.len()
        )));
    }
    Ok(out)
}

/// `n` tiers drawn at random in the proportions `shares`: tier j gets the examples at positions
/// ⌊Sⱼ₋₁·n⌉ to ⌊Sⱼ·n⌉ (S the cumulative shares) of a permutation drawn from `seed`.
fn draw(shares: &[f64], n: usize, seed: u64) -> Vec<u8> {
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rand_chacha::ChaCha20Rng::seed_from_u64(seed));
    let mut out = vec![0u8; n];
    let mut cumulative = 0.0;
    let mut start = 0usize;
    for (j, share) in shares.iter().enumerate() {
        cumulative += share;
        let end = if j + 1 == shares.len() { n } else { ((cumulative * n as f64).round() as usize).min(n) };
        for &i in &order[start.min(end)..end] {
            out[i] = u8::try_from(j).unwrap_or(u8::MAX);
        }
        start = end.max(start);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budgets(extra: &str) -> BudgetsConfig {
        toml::from_str(&format!("epsilons = [1.0, 2.0, 3.0]\n{extra}")).unwrap()
    }

    #[test]
    fn a_random_assignment_has_the_shares_and_follows_its_seed() {
        let b = budgets("shares = [0.34, 0.43, 0.23]\nseed = 7");
        let of = b.assignment(&DataConfig::default(), 1000).unwrap();
        let count = |t: u8| of.iter().filter(|&&x| x == t).count();
        assert_eq!((count(0), count(1), count(2)), (340, 430, 230));
        assert_eq!(of, b.assignment(&DataConfig::default(), 1000).unwrap());
        let other = BudgetsConfig { seed: 8, ..b.clone() }.assignment(&DataConfig::default(), 1000).unwrap();
        assert_ne!(of, other);
    }

    #[test]
    fn a_budget_file_is_read_in_order_and_bad_lines_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.csv");
        let with = |text: &str| {
            std::fs::write(&path, text).unwrap();
            BudgetsConfig { file: Some(path.clone()), ..budgets("") }
        };
        assert_eq!(with("epsilon\n3\n1\n2.0\n").assignment(&DataConfig::default(), 3).unwrap(), [2, 0, 1]);
        assert_eq!(
            with("3\n1\n2\n1\n").assignment(&DataConfig { train_subset: 2, ..DataConfig::default() }, 2).unwrap(),
            [2, 0],
            "a subset takes the first lines"
        );
        for (text, n, want) in [
            ("1\n2\n", 3, "2 epsilons for 3 training examples"),
            ("1\n2\n3\n1\n", 3, "more than the 3"),
            ("1\nabc\n2\n", 3, "line 2: `abc` is not a number"),
            ("1\n-1\n2\n", 3, "line 2: `-1` is not a positive epsilon"),
            ("1\n0\n2\n", 3, "line 2: `0` is not a positive"),
            ("1\n2.5\n2\n", 3, "line 2: `2.5` is not one of privacy.budgets.epsilons"),
            ("1\n\n2\n", 3, "line 2: `` is not a number"),
        ] {
            let e = with(text).assignment(&DataConfig::default(), n).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("b.csv"), "{text:?}: {e}");
        }
        let missing = BudgetsConfig { file: Some(dir.path().join("none.csv")), ..budgets("") };
        assert!(missing.assignment(&DataConfig::default(), 3).unwrap_err().to_string().contains("none.csv"));
    }

    #[test]
    fn bad_sections_are_refused_by_field() {
        for (extra, method, want) in [
            ("shares = [0.5, 0.5, 0.0]", Method::Plain, "privacy.budgets"),
            ("shares = [0.5, 0.5, 0.0]", Method::Sgd, "sgd-filtered"),
            ("", Method::Filtered, "privacy.budgets.file"),
            ("file = \"a\"\nshares = [0.5, 0.5, 0.0]", Method::Filtered, "one of file, column and shares"),
            ("column = \"eps\"", Method::Filtered, "data.ignore_columns"),
            ("shares = [0.5, 0.5]", Method::Filtered, "2 shares for 3 tiers"),
            ("shares = [0.5, 0.6, -0.1]", Method::Filtered, "[0, 1]"),
            ("shares = [0.5, 0.4, 0.0]", Method::Filtered, "add up to 0.9"),
            ("file = \"a\"\nseed = 3", Method::Filtered, "privacy.budgets.seed"),
        ] {
            let e = budgets(extra).check(method, &DataConfig::default()).unwrap_err().to_string();
            assert!(e.contains(want), "{extra} / {method:?}: {e}");
        }
        let twice = BudgetsConfig { epsilons: vec![1.0, 2.0, 1.0], ..budgets("shares = [0.5, 0.5, 0.0]") };
        assert!(twice.check(Method::Filtered, &DataConfig::default()).unwrap_err().to_string().contains("given twice"));
        let zero = BudgetsConfig { epsilons: vec![1.0, 0.0, 3.0], ..budgets("shares = [0.5, 0.5, 0.0]") };
        assert!(
            zero.check(Method::SgdFiltered, &DataConfig::default()).unwrap_err().to_string().contains("not a positive")
        );
        assert!(budgets("shares = [0.34, 0.43, 0.23]").check(Method::SgdFiltered, &DataConfig::default()).is_ok());
    }

    #[test]
    fn a_csv_column_gives_each_example_its_tier() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("train.csv"), "x,eps,label\n1,3,0\n2,1,1\n3,2,0\n").unwrap();
        let data = DataConfig { dir: dir.path().into(), ignore_columns: vec!["eps".into()], ..DataConfig::default() };
        let b = BudgetsConfig { column: Some("eps".into()), ..budgets("") };
        b.check(Method::Filtered, &data).unwrap();
        assert_eq!(b.assignment(&data, 3).unwrap(), [2, 0, 1]);
        std::fs::write(dir.path().join("train.csv"), "x,eps,label\n1,3,0\n2,7,1\n3,2,0\n").unwrap();
        let e = b.assignment(&data, 3).unwrap_err().to_string();
        assert!(e.contains("train.csv") && e.contains("line 3: `7` is not one of"), "{e}");
        let other = BudgetsConfig { column: Some("tier".into()), ..budgets("") };
        assert!(other.assignment(&data, 3).unwrap_err().to_string().contains("no column `tier`"));
    }

    proptest::proptest! {
        /// A budget file of any bytes is read or refused, never a panic, and what is read
        /// names only declared tiers.
        #[test]
        fn mutated_budget_files_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..60), at in 0usize..20, b in proptest::prelude::any::<u8>()) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("b.csv");
            let mut valid = b"epsilon\n1\n2\n3\n1\n".to_vec();
            if at < valid.len() { valid[at] = b; }
            for text in [valid, bytes] {
                std::fs::write(&path, &text).unwrap();
                let cfg = BudgetsConfig { file: Some(path.clone()), ..budgets("") };
                if let Ok(of) = cfg.assignment(&DataConfig::default(), 4) {
                    proptest::prop_assert!(of.len() == 4 && of.iter().all(|&t| t < 3));
                }
            }
        }
    }
}
