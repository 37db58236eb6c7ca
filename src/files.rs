//! File helpers shared by several layers (data caches, run folders, model files): the bottom
//! of the crate's module graph, depending on nothing but [`crate::error`].

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Writes `bytes` to `path` so that a crash leaves either the old or the new content: to a
/// temporary file, fsync'd, renamed over the old one, and the directory fsync'd. The temporary
/// file is created new (`create_new`): a file or link already at its name is never written
/// through.
///
/// # Errors
/// If any of those fails.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    let tmp = tmp_path(path);
    {
        // A leftover of a crashed writer with the same process id is removed first.
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(Error::io(&tmp))?;
        f.write_all(bytes).map_err(Error::io(&tmp))?;
        f.sync_all().map_err(Error::io(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(Error::io(path))?;
    if let Ok(d) = std::fs::File::open(dir) {
        d.sync_all().map_err(Error::io(dir))?;
    }
    Ok(())
}

/// A temporary name beside `path`, unique to this process and call: two writers of one file
/// never share a temporary file.
fn tmp_path(path: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = path.file_name().map(std::ffi::OsStr::to_os_string).unwrap_or_default();
    name.push(format!(".{}.{k}.tmp", std::process::id()));
    path.with_file_name(name)
}
