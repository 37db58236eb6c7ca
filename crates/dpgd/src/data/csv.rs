//! CSV datasets: a folder holding `train.csv` and `test.csv`, each with a header row, numeric
//! feature columns and one label column (whole numbers 0–255). Parsed with the `csv` crate;
//! every refusal names the file, the line and the column.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::Split;
use crate::error::{Error, Result};

/// The two files of a CSV dataset.
pub const FILES: [&str; 2] = ["train.csv", "test.csv"];

/// The label column's name when the config gives none.
pub const DEFAULT_LABEL_COLUMN: &str = "label";

/// Reads one CSV split: the examples (shape `[1, 1, features]`, in [`Split::features`]) and the
/// SHA-256 of the file.
///
/// # Errors
/// [`Error::Data`] naming the file (and the line and column): unreadable, larger than memory
/// allows, no header, no `label_column`, no feature column, a row of another length, a cell
/// that is not a finite number, a label that is not a whole number 0–255, or no rows.
pub fn read(path: &Path, label_column: &str) -> Result<(Split, String)> {
    let bad = |message: String| Error::Data { path: path.into(), message };
    let len = std::fs::metadata(path).map_err(Error::io(path))?.len();
    // Parsed values take at most 4 bytes per 2 bytes of text ("0,"): 3× the file bounds it all.
    crate::memory::check(&format!("reading {}", path.display()), len.checked_mul(3), "use a smaller file")?;
    let bytes = std::fs::read(path).map_err(Error::io(path))?;
    let sha256 = super::idx::hex(&Sha256::digest(&bytes));
    let mut reader = ::csv::ReaderBuilder::new().has_headers(true).trim(::csv::Trim::All).from_reader(bytes.as_slice());
    let headers = reader.headers().map_err(|e| bad(format!("no readable header row ({e})")))?.clone();
    let label = headers.iter().position(|h| h == label_column).ok_or_else(|| {
        bad(format!(
            "no column `{label_column}` among {:?}: name the label column with data.label_column",
            headers.iter().collect::<Vec<_>>()
        ))
    })?;
    let width = headers.len() - 1;
    if width == 0 {
        return Err(bad("no feature columns besides the label".into()));
    }
    let (mut features, mut labels) = (Vec::new(), Vec::new());
    for record in reader.records() {
        let record = record.map_err(|e| match e.position() {
            Some(p) => bad(format!("line {}: {e}", p.line())),
            None => bad(e.to_string()),
        })?;
        let line = record.position().map_or(0, ::csv::Position::line);
        for (k, cell) in record.iter().enumerate() {
            let column = headers.get(k).unwrap_or("?");
            if k == label {
                let y = cell.parse::<u8>().map_err(|_| {
                    bad(format!("line {line}, column `{column}`: `{cell}` is not a label (a whole number 0-255)"))
                })?;
                labels.push(y);
            } else {
                let v =
                    cell.parse::<f32>().ok().filter(|v| v.is_finite()).ok_or_else(|| {
                        bad(format!("line {line}, column `{column}`: `{cell}` is not a finite number"))
                    })?;
                features.push(v);
            }
        }
    }
    if labels.is_empty() {
        return Err(bad("no rows below the header".into()));
    }
    Ok((Split { images: Vec::new(), features, labels, rows: 1, cols: width, channels: 1 }, sha256))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(text: &[u8]) -> Result<Split> {
        let dir = tempfile::tempdir().map_err(|e| Error::Environment(e.to_string()))?;
        let path = dir.path().join("train.csv");
        std::fs::write(&path, text).map_err(Error::io(&path))?;
        read(&path, "label").map(|(s, _)| s)
    }

    #[test]
    fn reads_features_and_labels_in_any_column_order() {
        let s = parse(b"x, label ,y\n1.5,2,-3\n0,0,1e-3\n").unwrap();
        assert_eq!((s.shape(), s.len()), ([1, 1, 2], 2));
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
