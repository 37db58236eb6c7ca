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
    /// Mean of the pixel values in [0, 1].
    pub mean: f32,
    /// Standard deviation of the pixel values in [0, 1].
    pub std: f32,
}

impl Normalize {
    /// MNIST's (0.1307, 0.3081).
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
    /// Writes examples `range` normalised by `norm` into `out` (`len × pixels`).
    pub fn normalised_into(&self, range: std::ops::Range<usize>, norm: Normalize, out: &mut [f32]) {
        let px = self.pixels();
        let (scale, shift) = (1.0 / (255.0 * norm.std), norm.mean / norm.std);
        for (o, &p) in out.iter_mut().zip(&self.images[range.start * px..range.end * px]) {
            *o = f32::from(p) * scale - shift;
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

/// A training and a test split read from a folder of IDX files.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// The training split.
    pub train: Split,
    /// The test split.
    pub test: Split,
    /// The folder it was read from.
    pub dir: PathBuf,
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
    /// label is below `classes`.
    pub fn load(dir: &Path, classes: usize) -> Result<Self> {
        let split = |images: &str, labels: &str| -> Result<Split> {
            let (ip, lp) = (locate(dir, images)?, locate(dir, labels)?);
            let im = idx::read(&ip, 3)?;
            let lb = idx::read(&lp, 1)?;
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
            Ok(Split { images: im.data, labels: lb.data, rows: im.dims[1], cols: im.dims[2] })
        };
        let train = split(FILES[0], FILES[1])?;
        let test = split(FILES[2], FILES[3])?;
        if (train.rows, train.cols) != (test.rows, test.cols) {
            return Err(Error::Data {
                path: dir.into(),
                message: "training and test images have different sizes".into(),
            });
        }
        Ok(Self { train, test, dir: dir.into() })
    }
}
