//! `[data.features]`: a fixed, data-independent transform of every example before training —
//! today the scattering transform ([`super::scattering`]) followed by each example's own group
//! normalisation — computed once per dataset and cached on disk.
//!
//! Privacy: each example's features are a function of that example alone and of constants
//! (no statistic of the dataset is used: the normalisation is of each example by itself, as
//! group normalisation is, with no learnt scale or shift), so training on the features has the
//! neighbouring relation and sensitivity bounds of training on the examples, and nothing is
//! charged for them. This is the data-free kind of normalisation Tramèr & Boneh 2021 use beside
//! one with noisy dataset statistics, which dpgd does not offer.
//!
//! The cache (`$DPGD_CACHE`, else `$XDG_CACHE_HOME/dpgd`, else `~/.cache/dpgd`, under
//! `features/`; `DPGD_CACHE=off`: none) holds the features of the training data: it is as
//! confidential as the data, and its folder is created readable by its owner only. A file is
//! named by the SHA-256 of the transform and the dataset's file fingerprints, carries its own
//! SHA-256, and is used only when all of it checks out; otherwise the features are recomputed
//! and the file rewritten. The checksum catches damage, not tampering: whoever can write the
//! cache folder can choose the features (as whoever can write the data folder can choose the
//! data). A cache that cannot be written is skipped.

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::fingerprint::Fingerprint;
use super::idx;
use super::scattering::Scattering2d;
use super::split::Split;
use crate::error::{Error, Result};

/// The transforms `[data.features]` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FeatureKind {
    /// The 2-D scattering transform of each channel ([`Scattering2d`]).
    Scattering,
}

/// `[data.features]`: which transform, its parameters, and the per-example normalisation.
///
/// ```toml
/// [data.features]
/// kind = "scattering"
/// j = 2          # scale: 2^j-pixel blocks (28 × 28 images give 7 × 7 per channel)
/// angles = 8     # orientations: 1 + 8j + 32j(j−1) channels (81 for j = 2)
/// groups = 27    # normalise each example in 27 groups of channels (0: do not normalise)
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Features {
    /// The transform.
    pub kind: FeatureKind,
    /// Scattering scale J.
    #[serde(default = "default_j")]
    pub j: usize,
    /// Scattering orientations L.
    #[serde(default = "default_angles")]
    pub angles: usize,
    /// Groups of channels each example is normalised in (to mean 0 and variance 1 over the
    /// group's values, with ε = 10⁻⁵ added to the variance); 0: not normalised.
    #[serde(default = "default_groups")]
    pub groups: usize,
}

fn default_j() -> usize {
    2
}
fn default_angles() -> usize {
    8
}
fn default_groups() -> usize {
    27
}

/// A model's feature transform and the shape of the images it takes: written into
/// `model.safetensors` (as `dpgd.features`) so that the model file alone says how images become
/// its input, and images of another shape are refused rather than transformed into features of
/// the right length but the wrong meaning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureInput {
    /// The transform.
    pub transform: Features,
    /// The shape `[channels, height, width]` of the images it was applied to in training.
    pub images: [usize; 3],
}

impl FeatureInput {
    /// The features of `split`, whose images must be of [`images`](Self::images)' shape.
    ///
    /// # Errors
    /// [`Error::Config`] naming `data.features` when the shapes differ; as [`Features::apply`].
    pub fn apply(&self, split: &Split) -> Result<Split> {
        if split.shape() != self.images {
            return Err(Error::config(
                "data.features",
                format!(
                    "images of shape {:?} (channels, height, width); the model's features are of images of shape {:?}",
                    split.shape(),
                    self.images
                ),
            ));
        }
        self.transform.apply(split)
    }
}

/// Added to a group's variance before dividing by its square root (as group normalisation).
pub const GROUP_EPS: f64 = 1e-5;

/// Bumped when the computation changes, so old cache files are not read.
const CACHE_VERSION: &str = "dpgd-features-1";
const MAGIC: &[u8; 8] = b"DPGDFEAT";

impl Features {
    /// The transform for examples of `shape` (`[channels, rows, cols]`), checked, and the shape
    /// of its output.
    ///
    /// # Errors
    /// [`Error::Config`] naming the `data.features` field: a scale or angle count out of range,
    /// images too small for the scale, or a group count that does not divide the channels.
    pub fn build(&self, shape: [usize; 3]) -> Result<(Scattering2d, [usize; 3])> {
        let FeatureKind::Scattering = self.kind;
        if shape[1] == 1 || shape[2] == 1 {
            return Err(Error::config(
                "data.features",
                format!(
                    "examples of shape {shape:?} are not images: the scattering transform needs 2-D images (IDX data), not CSV rows"
                ),
            ));
        }
        let s = Scattering2d::new(shape[1], shape[2], self.j, self.angles)?;
        let channels = shape[0] * s.channels();
        if self.groups > 0 && !channels.is_multiple_of(self.groups) {
            return Err(Error::config(
                "data.features.groups",
                format!(
                    "{} groups do not divide the {channels} feature channels: use a divisor of {channels}, or 0",
                    self.groups
                ),
            ));
        }
        let (h, w) = s.out_size();
        Ok((s, [channels, h, w]))
    }

    /// The features of every example of `split` (bytes read as x/255, real values as they are).
    ///
    /// # Errors
    /// As [`build`](Self::build); a split whose values do not match its examples and shape; and
    /// [`Error::TooLarge`] when the features would not fit in memory.
    pub fn apply(&self, split: &Split) -> Result<Split> {
        let (s, out_shape) = self.build(split.shape())?;
        self.apply_with(&s, out_shape, split)
    }

    /// [`apply`](Self::apply) with the transform `s` already built for `split`'s shape.
    fn apply_with(&self, s: &Scattering2d, out_shape: [usize; 3], split: &Split) -> Result<Split> {
        let held = if split.features.is_empty() { split.images.len() } else { split.features.len() };
        if split.len().checked_mul(split.pixels()) != Some(held) {
            return Err(Error::config(
                "data.features",
                format!(
                    "{held} values for {} examples of shape {:?}: the split is inconsistent",
                    split.len(),
                    split.shape()
                ),
            ));
        }
        let per = out_shape.iter().product::<usize>();
        // The features, and a second copy while the cache file is written.
        let bytes = split.len().checked_mul(per).and_then(|v| v.checked_mul(8)).map(|b| b as u64);
        crate::memory::check("the features of the data", bytes, "use fewer examples or a larger j")?;
        let mut features = vec![0.0f32; split.len() * per];
        let (plane, px) = (split.rows * split.cols, split.pixels());
        features.par_chunks_mut(per).enumerate().for_each(|(i, out)| {
            let mut image = vec![0.0f64; plane];
            for (c, chunk) in out.chunks_mut(s.out_len()).enumerate() {
                let at = i * px + c * plane;
                if split.features.is_empty() {
                    image.iter_mut().zip(&split.images[at..at + plane]).for_each(|(x, &b)| *x = f64::from(b) / 255.0);
                } else {
                    image.iter_mut().zip(&split.features[at..at + plane]).for_each(|(x, &v)| *x = f64::from(v));
                }
                s.transform(&image, chunk);
            }
            if self.groups > 0 {
                normalise_groups(out, self.groups);
            }
        });
        let [channels, rows, cols] = out_shape;
        Ok(Split { images: Vec::new(), features, labels: split.labels.clone(), rows, cols, channels })
    }

    /// Both splits (`train`, `test`: examples of one image shape) replaced by their features,
    /// and what the transform was applied to: read from the cache in `cache` when a file there
    /// matches this transform and these data files (`fingerprints`) exactly, else computed (and
    /// written there, if it can be).
    ///
    /// # Errors
    /// As [`apply`](Self::apply).
    pub fn transform_splits(
        &self,
        (train, test): (Split, Split),
        fingerprints: &[Fingerprint],
        cache: Option<&Path>,
    ) -> Result<(Split, Split, FeatureInput)> {
        let images = train.shape();
        let (s, shape) = self.build(images)?;
        let key = self.cache_key(fingerprints, images);
        let file = cache.map(|dir| dir.join(format!("{}.bin", &key[..32])));
        let (n_train, n_test) = (train.len(), test.len());
        // Reading a cache file holds it and the features at once.
        let bytes = cache_len(n_train, n_test, shape).and_then(|b| b.checked_mul(2));
        crate::memory::check("the features of the data", bytes, "use fewer examples or a larger j")?;
        let cached = file.as_deref().and_then(|f| read_cache(f, &key, n_train, n_test, shape));
        let (train_f, test_f) = match cached {
            Some(both) => both,
            None => {
                let (tr, te) = (self.apply_with(&s, shape, &train)?, self.apply_with(&s, shape, &test)?);
                if let Some(f) = &file {
                    // A cache that cannot be written only costs time on the next run.
                    let _ = write_cache(f, &key, shape, &tr.features, &te.features);
                }
                (tr.features, te.features)
            }
        };
        let [channels, rows, cols] = shape;
        let with = |s: Split, features: Vec<f32>| Split { images: Vec::new(), features, rows, cols, channels, ..s };
        let input = FeatureInput { transform: self.clone(), images };
        Ok((with(train, train_f), with(test, test_f), input))
    }

    /// Hex SHA-256 of the transform, the computation's version and the dataset's fingerprints
    /// and image shape.
    fn cache_key(&self, fingerprints: &[Fingerprint], images: [usize; 3]) -> String {
        let mut h = Sha256::new();
        h.update(CACHE_VERSION.as_bytes());
        h.update(serde_json::to_string(self).unwrap_or_default().as_bytes());
        for f in fingerprints {
            h.update(f.file.as_bytes());
            h.update(b"\0");
            h.update(f.sha256.as_bytes());
            h.update(b"\0");
        }
        h.update(format!("{images:?}").as_bytes());
        idx::hex(&h.finalize())
    }
}

/// Normalises one example's features in `groups` contiguous groups of channels.
fn normalise_groups(values: &mut [f32], groups: usize) {
    let per = values.len() / groups;
    for g in values.chunks_mut(per.max(1)) {
        let n = g.len() as f64;
        let mean = g.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = g.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n;
        let inv = 1.0 / (var + GROUP_EPS).sqrt();
        g.iter_mut().for_each(|v| *v = ((f64::from(*v) - mean) * inv) as f32);
    }
}

/// The default cache folder: `$DPGD_CACHE`, else `$XDG_CACHE_HOME/dpgd`, else `~/.cache/dpgd`,
/// each with `features/` appended; `None` if none is set or `DPGD_CACHE` is `off`.
#[must_use]
pub fn default_cache_dir() -> Option<PathBuf> {
    if std::env::var_os("DPGD_CACHE").is_some_and(|v| v == "off") {
        return None;
    }
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = env("DPGD_CACHE")
        .or_else(|| env("XDG_CACHE_HOME").map(|p| p.join("dpgd")))
        .or_else(|| env("HOME").map(|p| p.join(".cache").join("dpgd")))?;
    Some(base.join("features"))
}

/// The cache file's length for these counts and shape: header, values, trailing SHA-256.
fn cache_len(n_train: usize, n_test: usize, shape: [usize; 3]) -> Option<u64> {
    let values = n_train.checked_add(n_test)?.checked_mul(shape.iter().product())?.checked_mul(4)?;
    u64::try_from(header_len().checked_add(values)?.checked_add(32)?).ok()
}

const fn header_len() -> usize {
    MAGIC.len() + 64 + 5 * 8
}

fn header(key: &str, n_train: usize, n_test: usize, shape: [usize; 3]) -> Vec<u8> {
    let mut h = Vec::with_capacity(header_len());
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(key.as_bytes());
    for v in [n_train, n_test, shape[0], shape[1], shape[2]] {
        h.extend_from_slice(&(v as u64).to_le_bytes());
    }
    h
}

/// The two splits' features from `file`, if it is exactly the file [`write_cache`] writes for
/// this key, these counts and this shape (length, header and SHA-256 all checked); else `None`.
fn read_cache(
    file: &Path,
    key: &str,
    n_train: usize,
    n_test: usize,
    shape: [usize; 3],
) -> Option<(Vec<f32>, Vec<f32>)> {
    // The length is checked on the open file before reading, and no more than it is read, so a
    // file never makes us allocate more than the features we would compute.
    use std::io::Read;
    let expected = cache_len(n_train, n_test, shape)?;
    let f = std::fs::File::open(file).ok()?;
    if f.metadata().ok()?.len() != expected {
        return None;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(expected).ok()?);
    f.take(expected).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 != expected {
        return None;
    }
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
    if Sha256::digest(body).as_slice() != sum || !body.starts_with(&header(key, n_train, n_test, shape)) {
        return None;
    }
    let values: Vec<f32> =
        body[header_len()..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let split = n_train * shape.iter().product::<usize>();
    let test = values.get(split..)?.to_vec();
    let mut train = values;
    train.truncate(split);
    Some((train, test))
}

fn write_cache(file: &Path, key: &str, shape: [usize; 3], train: &[f32], test: &[f32]) -> Result<()> {
    let per: usize = shape.iter().product();
    let mut bytes = header(key, train.len() / per.max(1), test.len() / per.max(1), shape);
    bytes.reserve((train.len() + test.len()) * 4 + 32);
    for v in train.iter().chain(test) {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    let sum = Sha256::digest(&bytes);
    bytes.extend_from_slice(&sum);
    if let Some(dir) = file.parent() {
        private_dir(dir)?;
    }
    crate::files::atomic_write(file, &bytes)
}

/// Creates `dir` (and its parents) with the folder itself readable by its owner only.
fn private_dir(dir: &Path) -> Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(Error::io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Dataset;

    fn tiny(n: usize, seed: u8) -> Split {
        let images = (0..n * 64).map(|k| ((k * 37 + usize::from(seed) * 11) % 256) as u8).collect();
        Split {
            images,
            features: Vec::new(),
            labels: (0..n).map(|i| (i % 2) as u8).collect(),
            rows: 8,
            cols: 8,
            channels: 1,
        }
    }

    fn data() -> Dataset {
        Dataset::in_memory(tiny(5, 1), tiny(3, 2), Some(2), "tiny".as_ref()).unwrap()
    }

    fn features() -> Features {
        Features { kind: FeatureKind::Scattering, j: 2, angles: 4, groups: 5 }
    }

    #[test]
    fn shape_and_group_normalisation() {
        let f = features().apply(&data().train).unwrap();
        let raw = Features { groups: 0, ..features() }.apply(&data().train).unwrap();
        // 1 + 2·4 + 16 = 25 channels of 2 × 2 (8 × 8 images pad to 16).
        assert_eq!((f.shape(), f.len(), f.features.len()), ([25, 2, 2], 5, 5 * 100));
        let moments = |g: &[f32]| {
            let mean = g.iter().map(|&v| f64::from(v)).sum::<f64>() / g.len() as f64;
            (mean, g.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / g.len() as f64)
        };
        for (group, raw) in f.features.chunks(20).zip(raw.features.chunks(20)) {
            let ((mean, var), (raw_mean, raw_var)) = (moments(group), moments(raw));
            let want = raw_var / (raw_var + GROUP_EPS);
            assert!(mean.abs() < 1e-5 && (var - want).abs() < 1e-4, "{mean} {var} {want}");
            let first = (f64::from(raw[0]) - raw_mean) / (raw_var + GROUP_EPS).sqrt();
            assert!((f64::from(group[0]) - first).abs() < 1e-4);
        }
    }

    #[test]
    fn each_example_depends_on_itself_only() {
        let (a, mut b) = (data().train, data().train);
        b.images[64..128].iter_mut().for_each(|p| *p = 255 - *p); // change example 1
        let (fa, fb) = (features().apply(&a).unwrap(), features().apply(&b).unwrap());
        for i in [0, 2, 3, 4] {
            assert_eq!(fa.features[i * 100..(i + 1) * 100], fb.features[i * 100..(i + 1) * 100]);
        }
        assert_ne!(fa.features[100..200], fb.features[100..200]);
    }

    #[test]
    fn csv_rows_are_refused_as_not_images() {
        let row = Split {
            images: Vec::new(),
            features: vec![0.5; 3 * 40],
            labels: vec![0, 1, 0],
            rows: 1,
            cols: 40,
            channels: 1,
        };
        let e = features().apply(&row).unwrap_err().to_string();
        assert!(e.contains("data.features") && e.contains("not images"), "{e}");
    }

    #[test]
    fn groups_must_divide_the_channels() {
        let f = Features { groups: 4, ..features() };
        let e = f.apply(&data().train).unwrap_err().to_string();
        assert!(e.contains("data.features.groups") && e.contains("25"), "{e}");
    }

    #[test]
    fn cache_is_used_only_when_every_byte_checks_out() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = data().with_features(&features(), None).unwrap();
        let cached = data().with_features(&features(), Some(dir.path())).unwrap();
        assert_eq!(fresh, cached);
        let file = std::fs::read_dir(dir.path()).unwrap().next().unwrap().unwrap().path();
        #[cfg(unix)]
        {
            // The folder a cache creates is its owner's only.
            use std::os::unix::fs::PermissionsExt;
            let sub = dir.path().join("sub");
            data().with_features(&features(), Some(&sub)).unwrap();
            assert_eq!(std::fs::metadata(&sub).unwrap().permissions().mode() & 0o777, 0o700);
        }
        let good = std::fs::read(&file).unwrap();
        // A planted value in an otherwise valid file is used (the cache is read)...
        let mut planted = good.clone();
        planted[header_len()..header_len() + 4].copy_from_slice(&7.0f32.to_le_bytes());
        let n = planted.len() - 32;
        let sum = Sha256::digest(&planted[..n]);
        planted[n..].copy_from_slice(&sum);
        std::fs::write(&file, &planted).unwrap();
        assert_eq!(data().with_features(&features(), Some(dir.path())).unwrap().train.features[0], 7.0);
        // ...and any changed byte, or a truncated or extended file, is not: recomputed instead.
        for k in (0..good.len()).step_by(37).chain([good.len() - 1]) {
            let mut bad = good.clone();
            bad[k] ^= 0x10;
            std::fs::write(&file, &bad).unwrap();
            assert_eq!(data().with_features(&features(), Some(dir.path())).unwrap(), fresh, "byte {k}");
        }
        for len in [0, good.len() - 1, good.len() + 1] {
            let mut bad = good.clone();
            bad.resize(len, 0);
            std::fs::write(&file, &bad).unwrap();
            assert_eq!(data().with_features(&features(), Some(dir.path())).unwrap(), fresh, "length {len}");
        }
    }
}
