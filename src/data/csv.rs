//! CSV datasets: a folder holding `train.csv` and `test.csv`, each with a header row, numeric
//! feature columns and one label column (whole numbers 0–255). Parsed with the `csv` crate;
//! every refusal names the file, the line and the column.
//!
//! An example of w feature columns has shape `[w, 1, 1]`: each feature is a channel, so
//! normalisation is per feature (`data.normalize` lists, or the test split's per-feature
//! statistics by default).

use std::path::Path;

use sha2::{Digest, Sha256};

use super::split::Split;
use crate::error::{Error, Result};

/// The two files of a CSV dataset.
pub const FILES: [&str; 2] = ["train.csv", "test.csv"];

/// The label column's name when the config gives none.
pub const DEFAULT_LABEL_COLUMN: &str = "label";

/// One CSV split as read.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The examples (shape `[features, 1, 1]`, in [`Split::features`]) and labels.
    pub split: Split,
    /// The SHA-256 of the file.
    pub sha256: String,
    /// The feature columns' names, in the order of an example's values.
    pub columns: Vec<String>,
}

/// Reads one CSV split with its labels in `label_column`.
///
/// # Errors
/// [`Error::Data`] naming the file (and the line and column): unreadable, larger than memory
/// allows, no header, no `label_column`, no feature column, a row of another length, a cell
/// that is not a finite number, a label that is not a whole number 0–255, or no rows.
pub fn read(path: &Path, label_column: &str) -> Result<Table> {
    read_skipping(path, label_column, &[])
}

/// As [`read`], skipping the columns named in `ignore` wherever present (neither features nor
/// the label).
///
/// # Errors
/// As [`read`].
pub fn read_skipping(path: &Path, label_column: &str, ignore: &[String]) -> Result<Table> {
    let bad = |message: String| Error::Data { path: path.into(), message };
    let bytes = read_bounded(path)?;
    let sha256 = super::idx::hex(&Sha256::digest(&bytes));
    let mut reader = ::csv::ReaderBuilder::new().has_headers(true).trim(::csv::Trim::All).from_reader(bytes.as_slice());
    let headers = reader.headers().map_err(|e| bad(format!("no readable header row ({e})")))?.clone();
    let label = headers.iter().position(|h| h == label_column).ok_or_else(|| {
        bad(format!(
            "no column `{label_column}` among {:?}: name the label column with data.label_column",
            headers.iter().collect::<Vec<_>>()
        ))
    })?;
    let skipped = |h: &str| ignore.iter().any(|c| c == h);
    let columns: Vec<String> =
        headers.iter().enumerate().filter(|&(k, h)| k != label && !skipped(h)).map(|(_, h)| h.to_string()).collect();
    if columns.is_empty() {
        return Err(bad("no feature columns besides the label".into()));
    }
    let (mut features, mut labels) = (Vec::new(), Vec::new());
    let lines = Lines::new(&bytes);
    for record in reader.records() {
        let record = record.map_err(|e| record_error(path, &e, &lines))?;
        let line = lines.line(record.position());
        for (k, cell) in record.iter().enumerate() {
            let column = headers.get(k).unwrap_or("?");
            if k == label {
                let y = cell.parse::<u8>().map_err(|_| {
                    bad(format!("line {line}, column `{column}`: `{cell}` is not a label (a whole number 0-255)"))
                })?;
                labels.push(y);
            } else if !skipped(column) {
                features.push(number(path, line, column, cell)?);
            }
        }
    }
    if labels.is_empty() {
        return Err(bad("no rows below the header".into()));
    }
    let split = Split { images: Vec::new(), features, labels, rows: 1, cols: 1, channels: columns.len() };
    Ok(Table { split, sha256, columns })
}

/// Reads examples of the feature `columns` (a model's input, in that order) from a CSV file, for
/// prediction: with a header row, the columns are found by name in any order and the others
/// (a label column, an id) are ignored; without one (a first row of numbers only), each row
/// must hold exactly the features, in order. Labels are all 0.
///
/// # Errors
/// [`Error::Data`] naming the file: unreadable, a named column missing, a headerless row of
/// another length, a cell that is not a finite number (by line and column), or no rows.
pub fn read_features(path: &Path, columns: &[String]) -> Result<Split> {
    let bad = |message: String| Error::Data { path: path.into(), message };
    let bytes = read_bounded(path)?;
    let mut reader =
        ::csv::ReaderBuilder::new().has_headers(false).trim(::csv::Trim::All).from_reader(bytes.as_slice());
    let lines = Lines::new(&bytes);
    let mut records = reader.records();
    let first = match records.next() {
        Some(r) => r.map_err(|e| record_error(path, &e, &lines))?,
        None => return Err(bad("the file is empty".into())),
    };
    let header = first.iter().any(|cell| cell.parse::<f32>().is_err());
    let (names, rows): (Vec<String>, Vec<::csv::StringRecord>) = if header {
        let names = first.iter().map(str::to_string).collect();
        (names, records.collect::<std::result::Result<_, _>>().map_err(|e| record_error(path, &e, &lines))?)
    } else {
        let rest: Vec<_> =
            records.collect::<std::result::Result<_, _>>().map_err(|e| record_error(path, &e, &lines))?;
        (columns.to_vec(), std::iter::once(first).chain(rest).collect())
    };
    let at: Vec<usize> = columns
        .iter()
        .map(|c| {
            names
                .iter()
                .position(|n| n == c)
                .ok_or_else(|| bad(format!("no column `{c}` among {names:?}: the model reads the columns {columns:?}")))
        })
        .collect::<Result<_>>()?;
    let mut features = Vec::with_capacity(rows.len() * columns.len());
    for record in &rows {
        let line = lines.line(record.position());
        if !header && record.len() != columns.len() {
            return Err(bad(format!(
                "line {line}: {} values, but the model reads {} feature columns {columns:?}; give them in that order, \
                 or add a header row naming them",
                record.len(),
                columns.len()
            )));
        }
        for (&k, column) in at.iter().zip(columns) {
            features.push(number(path, line, column, record.get(k).unwrap_or(""))?);
        }
    }
    if rows.is_empty() {
        return Err(bad("no rows of features".into()));
    }
    let labels = vec![0; rows.len()];
    Ok(Split { images: Vec::new(), features, labels, rows: 1, cols: 1, channels: columns.len() })
}

/// The file's bytes, after checking that parsing them fits in memory.
fn read_bounded(path: &Path) -> Result<Vec<u8>> {
    let len = std::fs::metadata(path).map_err(Error::io(path))?.len();
    // Parsed values take at most 4 bytes per 2 bytes of text ("0,"): 3× the file bounds it all.
    crate::memory::check(&format!("reading {}", path.display()), len.checked_mul(3), "use a smaller file")?;
    std::fs::read(path).map_err(Error::io(path))
}

fn record_error(path: &Path, e: &::csv::Error, lines: &Lines<'_>) -> Error {
    let message = match e.position() {
        Some(p) => format!("line {}: {e}", lines.line(Some(p))),
        None => e.to_string(),
    };
    Error::Data { path: path.into(), message }
}

/// The line numbers of a file's bytes, counted from its newlines: the csv crate's
/// `Position::line` is off by one after a CRLF line ending, a blank line, or (without a header)
/// the first record, so an error would name the line above the bad value.
pub(crate) struct Lines<'a> {
    bytes: &'a [u8],
    newlines: Vec<usize>,
}

impl<'a> Lines<'a> {
    /// The index of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, newlines: bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i).collect() }
    }

    /// The 1-based line where the record at `position` starts (its first byte that is not a
    /// line ending, so a blank line before it is not counted as its line).
    pub(crate) fn line(&self, position: Option<&::csv::Position>) -> u64 {
        let Some(p) = position else { return 0 };
        let mut at = usize::try_from(p.byte()).unwrap_or(usize::MAX).min(self.bytes.len());
        while at < self.bytes.len() && matches!(self.bytes[at], b'\n' | b'\r') {
            at += 1;
        }
        self.newlines.partition_point(|&n| n < at) as u64 + 1
    }
}

/// A feature cell: a finite number.
fn number(path: &Path, line: u64, column: &str, cell: &str) -> Result<f32> {
    cell.parse::<f32>().ok().filter(|v| v.is_finite()).ok_or_else(|| Error::Data {
        path: path.into(),
        message: format!("line {line}, column `{column}`: `{cell}` is not a finite number"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(text: &[u8]) -> Result<Split> {
        let dir = tempfile::tempdir().map_err(|e| Error::Environment(e.to_string()))?;
        let path = dir.path().join("train.csv");
        std::fs::write(&path, text).map_err(Error::io(&path))?;
        read(&path, "label").map(|t| t.split)
    }

    #[test]
    fn reads_features_and_labels_in_any_column_order() {
        let s = parse(b"x, label ,y\n1.5,2,-3\n0,0,1e-3\n").unwrap();
        assert_eq!((s.shape(), s.len()), ([2, 1, 1], 2));
        assert_eq!((s.features, s.labels), (vec![1.5, -3.0, 0.0, 1e-3], vec![2, 0]));
    }

    #[test]
    fn refusals_name_the_line_and_column() {
        for (text, want) in [
            (&b"x,label\n1,0\n2\n"[..], "line 3"),
            (b"x,label\n1,0\nabc,1\n", "line 3, column `x`: `abc`"),
            (b"x,label\nNaN,0\n", "`NaN` is not a finite number"),
            (b"x,label\n1,300\n", "column `label`: `300` is not a label"),
            (b"x,y\n1,0\n", "no column `label`"),
            (b"label\n1\n", "no feature columns"),
            (b"x,label\n", "no rows"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("train.csv"), "{}: {e}", String::from_utf8_lossy(text));
        }
    }

    /// A bad value is named by its own line of the file, whatever the line endings, blank lines
    /// or header: the csv crate's own line count named the line above it after CRLF endings
    /// and blank lines.
    #[test]
    fn a_bad_value_is_named_by_its_own_line() {
        let rows: String = (0..10).map(|i| format!("{i},0\n")).collect();
        for (text, line) in [
            (format!("x,label\n{rows}abc,1\n"), 12),
            (format!("x,label\r\n{}abc,1\r\n", rows.replace('\n', "\r\n")), 12),
            ("x,label\n1,0\n\n\nabc,1\n".to_string(), 5),
        ] {
            let e = parse(text.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(&format!("line {line}, column `x`: `abc`")), "{text:?}: {e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.csv");
        std::fs::write(&path, "1,2\n3,4\n5,zz\n").unwrap();
        let e = read_features(&path, &["x".into(), "y".into()]).unwrap_err().to_string();
        assert!(e.contains("line 3, column `y`"), "{e}");
    }

    /// Prediction reads a model's columns by name from a file with a header (any order, other
    /// columns ignored), or in order from one without.
    #[test]
    fn ignored_columns_are_neither_features_nor_labels() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        std::fs::write(&path, b"id,x,eps,label\nabc,1.5,2,1\nd,3,1,0\n").unwrap();
        let t = read_skipping(&path, "label", &["id".into(), "eps".into(), "absent".into()]).unwrap();
        assert_eq!((t.columns, t.split.features, t.split.labels), (vec!["x".to_string()], vec![1.5, 3.0], vec![1, 0]));
    }

    #[test]
    fn features_for_prediction_by_name_or_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let columns = ["x".to_string(), "y".to_string()];
        let read = |text: &str| {
            let path = dir.path().join("in.csv");
            std::fs::write(&path, text).unwrap();
            read_features(&path, &columns)
        };
        let named = read("id,y,species,x\n7,2.5,1,-1\n8,0,0,3e2\n").unwrap();
        assert_eq!((named.shape(), named.features), ([2, 1, 1], vec![-1.0, 2.5, 300.0, 0.0]));
        let plain = read("-1,2.5\n300,0\n").unwrap();
        assert_eq!(plain.features, vec![-1.0, 2.5, 300.0, 0.0]);
        for (text, want) in [
            ("a,y\n1,2\n", "no column `x`"),
            ("1,2,3\n", "3 values, but the model reads 2"),
            ("x,y\n1,zz\n", "line 2, column `y`: `zz`"),
            ("x,y\n", "no rows"),
            ("", "empty"),
        ] {
            let e = read(text).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("in.csv"), "{text:?}: {e}");
        }
    }

    proptest! {
        /// Arbitrary bytes, and valid files with bytes changed, never panic.
        #[test]
        fn mutated_files_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), at in 0usize..40, b in any::<u8>()) {
            let _ = parse(&bytes);
            let mut valid = b"a,b,label\n1,2,0\n3.5,-4,1\n".to_vec();
            let i = at % valid.len();
            valid[i] = b;
            let _ = parse(&valid);
        }
    }
}
