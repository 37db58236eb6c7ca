//! Memory limits: sizes driven by input are checked against the machine before allocating.

use crate::error::{Error, Result};

/// Memory this process may plan to use: 90 % of the machine's physical memory (from
/// `/proc/meminfo`), or 16 GiB where that cannot be read.
#[must_use]
pub fn limit() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kib| kib.saturating_mul(1024))
    });
    total.map_or(16 << 30, |t| t / 10 * 9)
}

/// `Ok` if `needed` bytes (None: more than a u64 holds) fit under [`limit`]; else an
/// [`Error::TooLarge`] saying what and how to fix it.
///
/// # Errors
/// As above.
pub fn check(what: &str, needed: Option<u64>, fix: &str) -> Result<()> {
    let limit = limit();
    match needed {
        Some(n) if n <= limit => Ok(()),
        n => Err(Error::TooLarge { what: what.into(), needed: n.unwrap_or(u64::MAX), limit, fix: fix.into() }),
    }
}
