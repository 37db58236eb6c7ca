//! The dataset step: fill `datasets/<name>/` from a local copy (`--from DIR`, the folder named
//! by `$DPGD_DATASETS`, or a system folder) or, for users with internet, the public mirrors,
//! and verify every file.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Dataset, FILES, Normalize, idx, locate};
use crate::error::{Error, Result};

pub use super::known::{FASHION_MNIST_SHA256, KNOWN, Known, MNIST_SHA256};

/// What the fetch step did with one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The file in the destination folder.
    pub path: PathBuf,
    /// Where it came from (`already present`, a local path, or a URL).
    pub source: String,
    /// Whether its SHA-256 was checked against a published value.
    pub verified: bool,
}

/// Fills `dest` with the four files of dataset `name`, taken from `from` if given, else from
/// the first local folder that has them, else from the public mirrors (needs `curl`). Every
/// file is checked (SHA-256 where published, and a full IDX parse) before it is kept.
pub fn fetch(name: &str, dest: &Path, from: Option<&Path>) -> Result<Vec<Fetched>> {
    let custom = Known { name: "custom", local: &[], mirrors: &[], sha256: None, normalize: Normalize::MNIST };
    let known = KNOWN.iter().find(|k| k.name == name).or(from.map(|_| &custom)).ok_or_else(|| Error::Data {
        path: dest.into(),
        message: format!(
            "`{name}` is not a dataset the fetch step knows (mnist, fashion-mnist); for another IDX dataset use \
             --from DIR"
        ),
    })?;
    std::fs::create_dir_all(dest).map_err(Error::io(dest))?;
    let mut out = Vec::new();
    for stem in FILES {
        let expected = known.sha256.and_then(|h| h.iter().find(|(f, _)| *f == stem).map(|(_, h)| *h));
        if let Ok(existing) = locate(dest, stem)
            && check(&existing, stem, expected).is_ok()
        {
            out.push(Fetched { path: existing, source: "already present".into(), verified: expected.is_some() });
            continue;
        }
        let target = dest.join(format!("{stem}.gz"));
        let source = copy_local(known, from, stem, &target, expected).or_else(|local_err| {
            let local_err = message_of(local_err);
            download(known, stem, &target, expected).map_err(message_of).map_err(|net_err| Error::Data {
                path: target.clone(),
                message: format!(
                    "{stem} of {name}: no local copy ({local_err}) and no mirror answered ({net_err}). Without \
                     internet, use a copy you have: `dpgd data fetch {name} --from DIR` (DIR holding the four IDX \
                     files, .gz or not), or set {LOCAL_DATASETS_VAR}=FOLDER where FOLDER/{name}/ holds them",
                    name = known.name
                ),
            })
        })?;
        out.push(Fetched { path: target, source, verified: expected.is_some() });
    }
    Dataset::load(dest, None)?;
    Ok(out)
}

/// An error's message without the path [`Error::Data`] puts before it (the caller names it once).
fn message_of(e: Error) -> String {
    match e {
        Error::Data { message, .. } => message,
        other => other.to_string(),
    }
}

/// Checks one file: its uncompressed SHA-256 (if `expected`) and that it parses as IDX.
fn check(path: &Path, stem: &str, expected: Option<&str>) -> Result<()> {
    let array = idx::read(path, if stem.contains("idx3") { 3 } else { 1 })?;
    if let Some(want) = expected
        && array.sha256 != want
    {
        return Err(Error::Data {
            path: path.into(),
            message: format!("SHA-256 {} does not match the published {want}", array.sha256),
        });
    }
    Ok(())
}

/// The environment variable naming a local folder of datasets (`<folder>/<name>/` holds the
/// files of dataset `<name>`): a mirror for machines without internet. This repository's
/// `.cargo/config.toml` points it at the project machines' shared copy.
pub const LOCAL_DATASETS_VAR: &str = "DPGD_DATASETS";

fn local_sources(name: &str) -> Option<PathBuf> {
    std::env::var_os(LOCAL_DATASETS_VAR).filter(|v| !v.is_empty()).map(|d| PathBuf::from(d).join(name))
}

fn copy_local(known: &Known, from: Option<&Path>, stem: &str, target: &Path, expected: Option<&str>) -> Result<String> {
    let dirs: Vec<PathBuf> = match from {
        Some(d) => vec![d.to_path_buf()],
        None => local_sources(known.name).into_iter().chain(known.local.iter().map(PathBuf::from)).collect(),
    };
    let mut last = String::from("no local folder given or found");
    for dir in dirs {
        let Ok(src) = locate(&dir, stem) else {
            last = format!("{stem} not in {}", dir.display());
            continue;
        };
        match check(&src, stem, expected) {
            Ok(()) => {
                let tmp = target.with_extension("part");
                if src.extension().is_some_and(|e| e == "gz") {
                    std::fs::copy(&src, &tmp).map_err(Error::io(&src))?;
                } else {
                    gzip_file(&src, &tmp)?;
                }
                std::fs::rename(&tmp, target).map_err(Error::io(target))?;
                return Ok(src.display().to_string());
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(Error::Data { path: target.into(), message: last })
}

fn gzip_file(src: &Path, dst: &Path) -> Result<()> {
    let bytes = std::fs::read(src).map_err(Error::io(src))?;
    let file = std::fs::File::create(dst).map_err(Error::io(dst))?;
    let mut enc = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    std::io::Write::write_all(&mut enc, &bytes).map_err(Error::io(dst))?;
    enc.finish().map_err(Error::io(dst))?;
    Ok(())
}

fn download(known: &Known, stem: &str, target: &Path, expected: Option<&str>) -> Result<String> {
    let tmp = target.with_extension("download");
    let mut errors = Vec::new();
    for base in known.mirrors {
        let url = format!("{base}{stem}.gz");
        let status = Command::new("curl")
            .args(["-fsSL", "--retry", "2", "--max-time", "300", "-o"])
            .arg(&tmp)
            .arg(&url)
            .status();
        match status {
            Ok(s) if s.success() => match check(&tmp, stem, expected) {
                Ok(()) => {
                    std::fs::rename(&tmp, target).map_err(Error::io(target))?;
                    return Ok(url);
                }
                Err(e) => errors.push(format!("{url}: {e}")),
            },
            Ok(s) => errors.push(format!("{url}: curl exited with {s}")),
            Err(e) => errors.push(format!("curl could not run ({e}); install curl or pass --from DIR")),
        }
    }
    let _ = std::fs::remove_file(&tmp);
    Err(Error::Data { path: target.into(), message: errors.join("; ") })
}
