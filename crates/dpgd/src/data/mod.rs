//! Datasets: MNIST-format IDX files (MNIST, Fashion-MNIST, or any folder of IDX files),
//! normalisation, and the dataset fetch step.

pub mod fetch;
pub mod idx;
pub mod synthetic;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Normalisation `x ↦ (x/255 − mean)/std`, as in the Opacus MNIST example.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Normalize {
    /// Mean of the pixel values in [0, 1] (default: MNIST's).
    #[serde(default = "mnist_mean")]
    pub mean: f32,
    /// Standard deviation of the pixel values in [0, 1] (default: MNIST's).
    #[serde(default = "mnist_std")]
    pub std: f32,
}

fn mnist_mean() -> f32 {
    Normalize::MNIST.mean
}
fn mnist_std() -> f32 {
    Normalize::MNIST.std
}

impl Normalize {
    /// MNIST's (0.1307, 0.3081): the pixel mean and std of MNIST's *training* split
    /// (0.13066, 0.30811), as published with the Opacus and PyTorch MNIST examples — a public
    /// constant of the literature, never recomputed from the data a run trains on.
    pub const MNIST: Normalize = Normalize { mean: 0.1307, std: 0.3081 };
}

/// One split of an image-classification dataset, stored as bytes (normalised on the fly so
/// the dataset costs one byte per pixel in memory).
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// Pixels, `n × rows × cols`.
    pub images: Vec<u8>,
    /// Labels, `n`.
    pub labels: Vec<u8>,
    /// Image height.
    pub rows: usize,
    /// Image width.
    pub cols: usize,
}

impl Split {
    /// Number of examples.
    #[must_use]
    pub fn len(&self) -> usize {
        self.labels.len()
    }
    /// Whether the split is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
    /// Pixels per example.
    #[must_use]
    pub fn pixels(&self) -> usize {
        self.rows * self.cols
    }
    /// Writes examples `range` normalised by `norm` into `out` (`len × pixels`), as
    /// [`Examples::normalised_into`] on the whole split.
    pub fn normalised_into(&self, range: std::ops::Range<usize>, norm: Normalize, out: &mut [f32]) {
        self.head(0).normalised_into(range, norm, out);
    }
    /// A borrowed view of the first `n` examples (all of them if `n` is 0 or larger than the
    /// split): training and evaluation read the dataset through views, so it is held once.
    #[must_use]
    pub fn head(&self, n: usize) -> Examples<'_> {
        let n = if n == 0 { self.len() } else { n.min(self.len()) };
        Examples {
            images: &self.images[..n * self.pixels()],
            labels: &self.labels[..n],
            rows: self.rows,
            cols: self.cols,
        }
    }
    /// The first `n` examples (all of them if `n` is 0 or larger than the split).
    #[must_use]
    pub fn truncated(mut self, n: usize) -> Self {
        if n > 0 && n < self.len() {
            self.images.truncate(n * self.pixels());
            self.labels.truncate(n);
        }
        self
    }
}

/// A borrowed run of examples of a [`Split`] (see [`Split::head`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Examples<'a> {
    images: &'a [u8],
    labels: &'a [u8],
    rows: usize,
    cols: usize,
}

impl Examples<'_> {
    /// Number of examples.
    #[must_use]
    pub fn len(&self) -> usize {
        self.labels.len()
    }
    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
    /// Pixels per example.
    #[must_use]
    pub fn pixels(&self) -> usize {
        self.rows * self.cols
    }
    /// The labels.
    #[must_use]
    pub fn labels(&self) -> &[u8] {
        self.labels
    }
    /// Writes examples `range` normalised by `norm` into `out` (`len × pixels`).
    pub fn normalised_into(&self, range: std::ops::Range<usize>, norm: Normalize, out: &mut [f32]) {
        let px = self.pixels();
        let (scale, shift) = (1.0 / (255.0 * norm.std), norm.mean / norm.std);
        for (o, &p) in out.iter_mut().zip(&self.images[range.start * px..range.end * px]) {
            *o = f32::from(p) * scale - shift;
        }
    }
}

/// A training and a test split read from a folder of IDX files.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// The training split.
    pub train: Split,
    /// The test split.
    pub test: Split,
    /// The folder it was read from.
    pub dir: PathBuf,
    fingerprints: Vec<Fingerprint>,
}

/// The standard file stems of an MNIST-format dataset.
pub const FILES: [&str; 4] =
    ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"];

/// Finds `stem` or `stem.gz` in `dir`.
pub fn locate(dir: &Path, stem: &str) -> Result<PathBuf> {
    for name in [format!("{stem}.gz"), stem.to_string()] {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(Error::Data {
        path: dir.join(format!("{stem}.gz")),
        message: format!(
            "not found (neither {stem} nor {stem}.gz is in {}); run `dpgd data fetch mnist`, or point data.dir at a folder of IDX files",
            dir.display()
        ),
    })
}

impl Dataset {
    /// Reads the four MNIST-format files from `dir`, checking shapes, counts and that every
    /// label is below `classes`, and fingerprinting each file (SHA-256 of its uncompressed
    /// content).
    ///
    /// # Errors
    /// [`Error::Data`] naming the file and the problem (missing, malformed, truncated, an empty
    /// training set, images of size 0, labels out of range, files that do not belong together).
    pub fn load(dir: &Path, classes: usize) -> Result<Self> {
        let mut fingerprints = Vec::with_capacity(4);
        let mut split = |images: &str, labels: &str| -> Result<Split> {
            let (ip, lp) = (locate(dir, images)?, locate(dir, labels)?);
            let im = idx::read(&ip, 3)?;
            let lb = idx::read(&lp, 1)?;
            if im.dims[1] == 0 || im.dims[2] == 0 {
                return Err(Error::Data {
                    path: ip,
                    message: format!("images of size {}x{}: nothing to learn from", im.dims[1], im.dims[2]),
                });
            }
            if im.dims[0] != lb.dims[0] {
                return Err(Error::Data {
                    path: lp,
                    message: format!(
                        "{} labels for {} images in {}: the files do not belong together",
                        lb.dims[0],
                        im.dims[0],
                        ip.display()
                    ),
                });
            }
            if let Some((i, &y)) = lb.data.iter().enumerate().find(|&(_, &y)| usize::from(y) >= classes) {
                return Err(Error::Data {
                    path: lp,
                    message: format!(
                        "label {y} of example {i} is not a class in 0..{classes}: the labels are corrupt or mislabelled"
                    ),
                });
            }
            for (path, a) in [(&ip, &im), (&lp, &lb)] {
                let name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                fingerprints.push(Fingerprint { file: name, sha256: a.sha256.clone() });
            }
            Ok(Split { images: im.data, labels: lb.data, rows: im.dims[1], cols: im.dims[2] })
        };
        let train = split(FILES[0], FILES[1])?;
        let test = split(FILES[2], FILES[3])?;
        if train.is_empty() {
            return Err(Error::Data {
                path: locate(dir, FILES[0])?,
                message: "the training set has 0 examples: there is nothing to train on".into(),
            });
        }
        if (train.rows, train.cols) != (test.rows, test.cols) {
            return Err(Error::Data {
                path: dir.into(),
                message: format!(
                    "training images are {}x{} but test images {}x{}",
                    train.rows, train.cols, test.rows, test.cols
                ),
            });
        }
        Ok(Self { train, test, dir: dir.into(), fingerprints })
    }

    /// The normalisation to use when the config gives none, chosen from the *test* split only
    /// ([`public_normalize`]): nothing about the training data may choose it, since it is
    /// published (config, model file, θ) and two neighbouring training sets must give the same.
    #[must_use]
    pub fn default_normalize(&self) -> Normalize {
        let test_images = self.fingerprints.iter().find(|f| f.file.starts_with(FILES[2])).map(|f| f.sha256.as_str());
        public_normalize(&self.test, test_images)
    }

    /// The SHA-256 fingerprints of the four files, training images first.
    #[must_use]
    pub fn fingerprints(&self) -> &[Fingerprint] {
        &self.fingerprints
    }
}

/// The default normalisation, a function of public data only — the test split and the SHA-256
/// of its images file — and never of the training split (which it cannot see): a known
/// dataset's published constants ([`fetch::KNOWN`]) when the test images are that dataset's,
/// else the mean and std of the test split's pixels (std 1 for a constant split). dpgd treats
/// the test split as public: test accuracy is released without noise.
#[must_use]
pub fn public_normalize(test: &Split, test_images_sha256: Option<&str>) -> Normalize {
    let known = fetch::KNOWN.iter().find(|k| {
        k.sha256.is_some_and(|h| h.iter().any(|(stem, sha)| *stem == FILES[2] && Some(*sha) == test_images_sha256))
    });
    if let Some(k) = known {
        return k.normalize;
    }
    let n = test.images.len().max(1) as f64;
    let mean = test.images.iter().map(|&p| f64::from(p)).sum::<f64>() / (255.0 * n);
    let var = test.images.iter().map(|&p| (f64::from(p) / 255.0 - mean).powi(2)).sum::<f64>() / n;
    let std = var.sqrt();
    Normalize { mean: mean as f32, std: if std > 1e-6 { std as f32 } else { 1.0 } }
}

/// The SHA-256 of one dataset file's uncompressed content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// The file's name in its folder.
    pub file: String,
    /// Hex SHA-256 of its uncompressed bytes.
    pub sha256: String,
}
