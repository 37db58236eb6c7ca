//! IDX files (the MNIST format), gzip-compressed or raw, with errors that name the file and
//! the problem.

use std::io::Read;
use std::path::Path;

use flate2::read::GzDecoder;

use crate::error::{Error, Result};

/// An IDX array of unsigned bytes: its dimensions and data.
#[derive(Debug, Clone, PartialEq)]
pub struct IdxArray {
    /// Dimensions, outermost first.
    pub dims: Vec<usize>,
    /// Row-major data.
    pub data: Vec<u8>,
}

/// Reads the whole file, un-gzipping it when it starts with the gzip magic bytes.
pub fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    let raw = std::fs::read(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::Data {
                path: path.into(),
                message: "not found; run `dpgd data fetch mnist` (or set data.dir)".into(),
            }
        } else {
            Error::io(path)(e)
        }
    })?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::with_capacity(raw.len() * 4);
        GzDecoder::new(&raw[..]).read_to_end(&mut out).map_err(|e| Error::Data {
            path: path.into(),
            message: format!("corrupt or truncated gzip stream ({e}); delete it and fetch the dataset again"),
        })?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

/// Parses an IDX array of unsigned bytes with `ndim` dimensions, checking the magic number
/// and that the file holds exactly the data its header announces.
pub fn parse(path: &Path, bytes: &[u8], ndim: usize) -> Result<IdxArray> {
    let bad = |message: String| Error::Data { path: path.into(), message };
    if bytes.len() < 4 + 4 * ndim {
        return Err(bad(format!("only {} bytes: too short for an IDX header; the file is truncated", bytes.len())));
    }
    if bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08 || bytes[3] as usize != ndim {
        return Err(bad(format!(
            "wrong magic number {:02x} {:02x} {:02x} {:02x}: expected 00 00 08 {ndim:02x} (unsigned bytes, {ndim} dimensions) — \
             is this the right file (images vs labels) of an IDX dataset?",
            bytes[0], bytes[1], bytes[2], bytes[3]
        )));
    }
    let dims: Vec<usize> = (0..ndim)
        .map(|i| u32::from_be_bytes(bytes[4 + 4 * i..8 + 4 * i].try_into().expect("4 bytes")) as usize)
        .collect();
    let expected = dims.iter().product::<usize>();
    let data = &bytes[4 + 4 * ndim..];
    if data.len() != expected {
        return Err(bad(format!(
            "header announces {dims:?} = {expected} bytes of data but the file holds {}: the file is {}",
            data.len(),
            if data.len() < expected { "truncated" } else { "followed by trailing garbage" }
        )));
    }
    Ok(IdxArray { dims, data: data.to_vec() })
}

/// Writes an IDX array of unsigned bytes, gzip-compressed, to `path`.
///
/// # Errors
/// If the file cannot be written.
pub fn write_gz(path: &Path, dims: &[u32], data: &[u8]) -> Result<()> {
    let mut bytes = vec![0, 0, 0x08, dims.len() as u8];
    for d in dims {
        bytes.extend(d.to_be_bytes());
    }
    bytes.extend_from_slice(data);
    let file = std::fs::File::create(path).map_err(Error::io(path))?;
    let mut enc = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
    std::io::Write::write_all(&mut enc, &bytes).map_err(Error::io(path))?;
    enc.finish().map_err(Error::io(path))?;
    Ok(())
}

/// Reads and parses an IDX file.
pub fn read(path: &Path, ndim: usize) -> Result<IdxArray> {
    parse(path, &read_bytes(path)?, ndim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 0, 8, dims.len() as u8];
        for d in dims {
            v.extend(d.to_be_bytes());
        }
        v.extend(data);
        v
    }

    #[test]
    fn parses_and_rejects_with_named_problems() {
        let p = Path::new("x-idx1-ubyte");
        let ok = parse(p, &idx(&[3], &[1, 2, 3]), 1).unwrap();
        assert_eq!(ok.dims, vec![3]);
        let e = parse(p, &idx(&[4], &[1, 2, 3]), 1).unwrap_err().to_string();
        assert!(e.contains("x-idx1-ubyte") && e.contains("truncated"), "{e}");
        let e = parse(p, &idx(&[2, 2], &[0; 4]), 1).unwrap_err().to_string();
        assert!(e.contains("magic"), "{e}");
        let e = parse(p, &[0, 0], 1).unwrap_err().to_string();
        assert!(e.contains("too short"), "{e}");
        let e = parse(p, &idx(&[2], &[1, 2, 3]), 1).unwrap_err().to_string();
        assert!(e.contains("trailing"), "{e}");
    }
}
