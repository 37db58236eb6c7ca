//! Reading the independently computed reference values (mpmath, published tables) kept
//! beside the tests: one row per line, `KIND value value …`.

/// The rows of `kind` in reference text `refs`, as numbers (panics on none: a test with no
/// reference values would pass vacuously).
pub fn rows(refs: &str, kind: &str) -> Vec<Vec<f64>> {
    let rows: Vec<Vec<f64>> = refs
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(kind))
        .map(|l| l.split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect())
        .collect();
    assert!(!rows.is_empty(), "no reference rows of kind {kind}");
    rows
}
