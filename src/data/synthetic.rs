//! A small synthetic image-classification dataset written as MNIST-format IDX files: the
//! fixture of the test suite (which must not need the real MNIST files) and a dataset for
//! trying dpgd without downloading anything.
//!
//! Each class has a prototype — a horizontal and a vertical bar at class-specific positions —
//! and every example is its class's prototype shifted by up to one pixel, with random
//! intensities and sparse pixel noise. A linear model separates the classes well and a small
//! CNN learns them within a few full-batch steps, so tests of learning stay fast.

use std::path::Path;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{FILES, idx};
use crate::error::Result;

/// The shape of a synthetic dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synthetic {
    /// Training examples.
    pub train: usize,
    /// Test examples.
    pub test: usize,
    /// Image height and width (at least 12).
    pub side: usize,
    /// Seed of the generator: the same seed gives the same bytes.
    pub seed: u64,
}

impl Default for Synthetic {
    /// 2,000 training and 500 test images of 28 × 28 pixels, 10 classes.
    fn default() -> Self {
        Self { train: 2000, test: 500, side: 28, seed: 1 }
    }
}

/// Number of classes of every synthetic dataset.
pub const CLASSES: usize = 10;

impl Synthetic {
    /// `n` images (`n × side × side` bytes) and their labels, drawn from `rng`.
    fn split(&self, n: usize, rng: &mut ChaCha8Rng) -> (Vec<u8>, Vec<u8>) {
        let s = self.side.max(12);
        let mut images = vec![0u8; n * s * s];
        let mut labels = Vec::with_capacity(n);
        for (i, img) in images.chunks_exact_mut(s * s).enumerate() {
            let class = (i * 7 + rng.random_range(0..CLASSES)) % CLASSES;
            labels.push(class as u8);
            let (dr, dc) = (rng.random_range(0..3usize), rng.random_range(0..3usize));
            let row = 1 + dr + class * (s - 6) / CLASSES;
            let col = 1 + dc + (class * 3 % CLASSES) * (s - 6) / CLASSES;
            let ink = rng.random_range(160..=255u16) as u8;
            for k in 2..s - 2 {
                img[row * s + k] = ink;
                img[(row + 1) * s + k] = ink / 2;
                img[k * s + col] = ink;
            }
            for px in img.iter_mut() {
                if rng.random_range(0..20u8) == 0 {
                    *px = rng.random_range(0..=255u16) as u8;
                }
            }
        }
        (images, labels)
    }

    /// Writes the four files (`train-images-idx3-ubyte.gz`, … as in MNIST) into `dir`.
    ///
    /// # Errors
    /// If `dir` cannot be created or a file cannot be written.
    pub fn write(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(crate::Error::io(dir))?;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let s = self.side.max(12) as u32;
        for (n, images, labels) in [(self.train, FILES[0], FILES[1]), (self.test, FILES[2], FILES[3])] {
            let (x, y) = self.split(n, &mut rng);
            idx::write_gz(&dir.join(format!("{images}.gz")), &[n as u32, s, s], &x)?;
            idx::write_gz(&dir.join(format!("{labels}.gz")), &[n as u32], &y)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Dataset;

    #[test]
    fn writes_a_loadable_deterministic_dataset_with_every_class() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let spec = Synthetic { train: 300, test: 100, side: 16, seed: 4 };
        spec.write(a.path()).unwrap();
        spec.write(b.path()).unwrap();
        let (da, db) = (Dataset::load(a.path(), Some(10)).unwrap(), Dataset::load(b.path(), Some(10)).unwrap());
        assert_eq!(da.train.images, db.train.images);
        assert_eq!((da.train.len(), da.test.len(), da.train.rows), (300, 100, 16));
        for c in 0..10u8 {
            assert!(da.train.labels.contains(&c), "class {c} missing");
        }
    }
}
