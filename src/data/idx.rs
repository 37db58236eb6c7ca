//! IDX files (the MNIST format), gzip-compressed or raw, read as a stream: the header is read
//! first, its size is checked (with overflow-checked arithmetic) against [`MAX_IDX_BYTES`], and
//! exactly the bytes it promises are then read — a lying header or a gzip bomb costs at most
//! what the file honestly holds, never what it claims. The SHA-256 of the uncompressed
//! content is computed on the way (the fingerprint a run records).

use std::io::{BufReader, Read};
use std::path::Path;

use flate2::read::GzDecoder;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The largest IDX payload read (1 GiB): far above any dataset this format is used for
/// (MNIST's training images are 47 MiB); a header announcing more is refused before anything
/// is allocated.
pub const MAX_IDX_BYTES: u64 = 1 << 30;

/// An IDX array of unsigned bytes: its dimensions, data, and the SHA-256 of the whole
/// uncompressed file.
#[derive(Debug, Clone, PartialEq)]
pub struct IdxArray {
    /// Dimensions, outermost first.
    pub dims: Vec<usize>,
    /// Row-major data.
    pub data: Vec<u8>,
    /// SHA-256 (hex) of the uncompressed file: header and data.
    pub sha256: String,
}

/// A reader that hashes what passes through it.
struct Hashing<R> {
    inner: R,
    hash: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// Reads and parses an IDX file of unsigned bytes with `ndim` dimensions, checking the magic
/// number and that the file holds exactly the data its header announces.
///
/// # Errors
/// [`Error::Data`] naming the file: missing, not IDX, a header whose size overflows or exceeds
/// [`MAX_IDX_BYTES`], truncated data, trailing bytes, or a corrupt gzip stream.
pub fn read(path: &Path, ndim: usize) -> Result<IdxArray> {
    read_any(path, &[ndim])
}

/// As [`read`], for a file with any of the dimension counts in `ndims` (e.g. images stored
/// `(n, H, W)` or `(n, H, W, C)`); [`IdxArray::dims`] says which.
///
/// # Errors
/// As [`read`]; a dimension count outside `ndims` is a wrong magic number.
pub fn read_any(path: &Path, ndims: &[usize]) -> Result<IdxArray> {
    let bad = |message: String| Error::Data { path: path.into(), message };
    let file = std::fs::File::open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            bad("not found; run `dpgd data fetch mnist` (or set data.dir)".into())
        } else {
            Error::io(path)(e)
        }
    })?;
    let on_disk = file.metadata().map_err(Error::io(path))?.len();
    let mut buffered = BufReader::new(file);
    let gzip = {
        let mut magic = [0u8; 2];
        let n = read_up_to(&mut buffered, &mut magic).map_err(Error::io(path))?;
        let gz = n == 2 && magic == [0x1f, 0x8b];
        // Re-open from the start (a BufReader cannot un-read).
        buffered = BufReader::new(std::fs::File::open(path).map_err(Error::io(path))?);
        gz
    };
    let inner: Box<dyn Read> = if gzip { Box::new(GzDecoder::new(buffered)) } else { Box::new(buffered) };
    let mut r = Hashing { inner, hash: Sha256::new() };
    let corrupt = |e: std::io::Error| {
        bad(format!("corrupt or truncated gzip stream ({e}); delete it and fetch the dataset again"))
    };
    let mut magic = [0u8; 4];
    let got = read_up_to(&mut r, &mut magic).map_err(corrupt)?;
    let ndim = usize::from(magic[3]);
    if got == 4 && (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || !ndims.contains(&ndim)) {
        let want: Vec<String> = ndims.iter().map(|d| format!("00 00 08 {d:02x}")).collect();
        return Err(bad(format!(
            "wrong magic number {:02x} {:02x} {:02x} {:02x}: expected {} (unsigned bytes, {ndims:?} dimensions) — \
             is this the right file (images vs labels) of an IDX dataset?",
            magic[0],
            magic[1],
            magic[2],
            magic[3],
            want.join(" or ")
        )));
    }
    let mut header = vec![0u8; 4 + 4 * ndim];
    header[..4].copy_from_slice(&magic);
    let got = got + read_up_to(&mut r, &mut header[4..]).map_err(corrupt)?;
    if got < header.len() {
        return Err(bad(format!("only {got} bytes: too short for an IDX header; the file is truncated")));
    }
    let dims: Vec<usize> =
        header[4..].chunks_exact(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize).collect();
    let expected = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
    let expected = match expected {
        Some(e) if e <= MAX_IDX_BYTES => e,
        _ => {
            return Err(bad(format!(
                "the header announces dimensions {dims:?}, more than the {} MiB this reader accepts: the header is corrupt \
                 or this is not a dataset file",
                MAX_IDX_BYTES >> 20
            )));
        }
    };
    if !gzip && on_disk != header.len() as u64 + expected {
        let held = on_disk.saturating_sub(header.len() as u64);
        return Err(size_mismatch(path, &dims, expected, held));
    }
    // Grows only as data arrives: a lying header costs what the file holds, not what it claims.
    let mut data = Vec::with_capacity(expected.min(1 << 26) as usize);
    (&mut r).take(expected).read_to_end(&mut data).map_err(corrupt)?;
    if (data.len() as u64) < expected {
        return Err(size_mismatch(path, &dims, expected, data.len() as u64));
    }
    let mut extra = [0u8; 1];
    if read_up_to(&mut r, &mut extra).map_err(corrupt)? > 0 {
        return Err(size_mismatch(path, &dims, expected, expected + 1));
    }
    let sha256 = hex(&r.hash.finalize());
    Ok(IdxArray { dims, data, sha256 })
}

fn size_mismatch(path: &Path, dims: &[usize], expected: u64, held: u64) -> Error {
    Error::Data {
        path: path.into(),
        message: format!(
            "the header announces {dims:?} = {expected} bytes of data but the file holds {}{held}: the file is {}",
            if held > expected { "more than " } else { "" },
            if held < expected { "truncated" } else { "followed by trailing garbage" }
        ),
    }
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Lower-case hex of `bytes`.
#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn idx(dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 0, 8, dims.len() as u8];
        for d in dims {
            v.extend(d.to_be_bytes());
        }
        v.extend(data);
        v
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, bytes).unwrap();
        enc.finish().unwrap()
    }

    fn parse(bytes: &[u8], ndim: usize) -> Result<IdxArray> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x-idx1-ubyte");
        std::fs::write(&p, bytes).unwrap();
        read(&p, ndim)
    }

    #[test]
    fn parses_and_rejects_with_named_problems() {
        let ok = parse(&idx(&[3], &[1, 2, 3]), 1).unwrap();
        assert_eq!((ok.dims.clone(), ok.data.clone()), (vec![3], vec![1, 2, 3]));
        assert_eq!(parse(&gz(&idx(&[3], &[1, 2, 3])), 1).unwrap(), ok, "gzip and raw read alike");
        let e = parse(&idx(&[4], &[1, 2, 3]), 1).unwrap_err().to_string();
        assert!(e.contains("x-idx1-ubyte") && e.contains("truncated"), "{e}");
        let e = parse(&idx(&[2, 2], &[0; 4]), 1).unwrap_err().to_string();
        assert!(e.contains("magic"), "{e}");
        let e = parse(&[0, 0], 1).unwrap_err().to_string();
        assert!(e.contains("too short"), "{e}");
        let e = parse(&idx(&[2], &[1, 2, 3]), 1).unwrap_err().to_string();
        assert!(e.contains("trailing"), "{e}");
        let e = parse(&gz(&idx(&[2], &[1, 2, 3])), 1).unwrap_err().to_string();
        assert!(e.contains("trailing"), "{e}");
    }

    #[test]
    fn headers_that_overflow_or_exceed_the_limit_are_refused_before_allocating() {
        // 2^32-ish dims: the product wraps modulo 2^64 without checked arithmetic.
        let e = parse(&idx(&[u32::MAX, u32::MAX, u32::MAX], &[]), 3).unwrap_err().to_string();
        assert!(e.contains("header announces dimensions"), "{e}");
        let e = parse(&gz(&idx(&[60_000, 28, 28 * 1000], &[0; 10])), 3).unwrap_err().to_string();
        assert!(e.contains("MiB"), "{e}");
    }

    #[test]
    fn a_gzip_bomb_is_read_only_as_far_as_the_header_promises() {
        // 64 MiB of zeros (compresses to ~64 KiB) behind a header promising 16 bytes.
        let mut bomb = idx(&[4, 2, 2], &[0; 16]);
        bomb.resize(bomb.len() + (64 << 20), 0);
        let small = gz(&bomb);
        assert!(small.len() < 1 << 20);
        let e = parse(&small, 3).unwrap_err().to_string();
        assert!(e.contains("trailing"), "{e}");
    }

    proptest! {
        /// Byte-level mutations of a valid file (raw or gzip): an answer or an error, never a
        /// panic, and never more data than the file announced.
        #[test]
        fn mutated_files_never_panic(
            flips in proptest::collection::vec((0usize..200, any::<u8>()), 0..6),
            cut in 0usize..220,
            zip in any::<bool>(),
        ) {
            let mut bytes = idx(&[3, 4, 4], &(0..48).map(|i| i as u8).collect::<Vec<_>>());
            if zip {
                bytes = gz(&bytes);
            }
            for (at, v) in flips {
                let len = bytes.len().max(1);
                if let Some(b) = bytes.get_mut(at % len) {
                    *b = v;
                }
            }
            bytes.truncate(cut.max(1));
            if let Ok(a) = parse(&bytes, 3) {
                prop_assert_eq!(a.data.len(), a.dims.iter().product::<usize>());
            }
        }
    }
}
