//! The real-MNIST suite, selected explicitly (it needs the MNIST files, which `cargo test` must
//! not): `cargo test -p dpgd --features real-mnist --test real_mnist`. It reads
//! `$DPGD_MNIST_DIR`, else `datasets/mnist` (filled by `dpgd data fetch mnist`), else
//! `$DPGD_DATASETS/mnist` (the local dataset folder of the fetch step).

use std::path::{Path, PathBuf};

use dpgd::data::Dataset;
use dpgd::data::fetch::MNIST_SHA256;
use dpgd::train::{RunOptions, Silent, TrainConfig, run};

fn mnist_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    let candidates = [
        std::env::var_os("DPGD_MNIST_DIR").map(PathBuf::from),
        Some(root.join("datasets/mnist")),
        std::env::var_os("DPGD_DATASETS").map(|d| PathBuf::from(d).join("mnist")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|d| d.join("train-images-idx3-ubyte.gz").exists() || d.join("train-images-idx3-ubyte").exists())
        .expect("the real-MNIST suite needs MNIST: run `dpgd data fetch mnist` or set DPGD_MNIST_DIR")
}

#[test]
fn the_files_are_mnist() {
    let d = Dataset::load(&mnist_dir(), Some(10)).unwrap();
    assert_eq!((d.train.len(), d.test.len(), d.train.rows, d.train.cols), (60_000, 10_000, 28, 28));
    assert_eq!(MNIST_SHA256.len(), 4);
    assert_eq!(d.default_normalize(), dpgd::data::Normalize::MNIST, "MNIST is recognised by its fingerprint");
}

/// The default normalisation is published (config, model file,
/// θ), so a training set and its neighbour — MNIST with one training image blanked — must give
/// the same one. Before the fix MNIST was recognised by its *training* images' SHA-256 and the
/// neighbour fell back to other statistics: (0.1307, 0.3081) against (0.13251, 0.31048).
#[test]
fn neighbouring_training_sets_publish_the_same_default_normalisation() {
    use dpgd::data::{FILES, idx};
    let d = Dataset::load(&mnist_dir(), Some(10)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut images = d.train.images.clone();
    images[..784].iter_mut().for_each(|p| *p = 0);
    let (n, t) = (d.train.len() as u32, d.test.len() as u32);
    idx::write_gz(&dir.path().join(format!("{}.gz", FILES[0])), &[n, 28, 28], &images).unwrap();
    idx::write_gz(&dir.path().join(format!("{}.gz", FILES[1])), &[n], &d.train.labels).unwrap();
    idx::write_gz(&dir.path().join(format!("{}.gz", FILES[2])), &[t, 28, 28], &d.test.images).unwrap();
    idx::write_gz(&dir.path().join(format!("{}.gz", FILES[3])), &[t], &d.test.labels).unwrap();
    let neighbour = Dataset::load(dir.path(), Some(10)).unwrap();
    assert_ne!(neighbour.fingerprints()[0], d.fingerprints()[0], "the training images differ");
    assert_eq!(neighbour.default_normalize(), d.default_normalize());
}

/// Plain and filtered private GD learn real digits on a 2,000-example subset at ε = 8.
#[test]
fn plain_and_filtered_gd_learn_real_digits() {
    let data = Dataset::load(&mnist_dir(), Some(10)).unwrap();
    for (method, extra) in [("plain", ""), ("filtered", "max_steps = 40")] {
        let text = format!(
            "name = \"mnist-{method}\"\n[data]\ndir = \"{}\"\ntrain_subset = 2000\ntest_subset = 1000\n[model]\n\
             preset = \"opacus-cnn\"\n[privacy]\nmethod = \"{method}\"\nepsilon = 8.0\ndelta = 1e-5\nclip = 1.0\n\
             steps = 30\n[train]\nlr = 2.0\nseed = 3\neval_every = 10\nchunk = 8\n{extra}\n",
            mnist_dir().display()
        );
        let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let s = run(&cfg, &data, dir.path(), &RunOptions::default(), &mut Silent).unwrap();
        let accuracy = s.result.unwrap().test_accuracy;
        assert!(accuracy > 0.6, "{method}: test accuracy {accuracy} on real MNIST");
    }
}
