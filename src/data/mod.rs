//! Datasets: MNIST-format IDX files (MNIST, Fashion-MNIST, or any folder of IDX files),
//! normalisation, and the dataset fetch step.

pub mod csv;
pub mod features;
pub mod fetch;
mod fingerprint;
pub mod idx;
mod known;
mod normalize;
pub mod scattering;
mod split;
pub mod synthetic;

pub use fingerprint::Fingerprint;
pub use normalize::{Channels, MIN_STD, Normalize};
pub use split::{Examples, Split};

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

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
    classes: usize,
    /// The transform the splits hold the features of ([`Dataset::with_features`]).
    features: Option<features::FeatureInput>,
    /// The feature columns' names, for data read from CSV.
    columns: Option<Vec<String>>,
    /// Where the training split holds one rank's shard ([`Dataset::keep_shard`]): its first
    /// example, the run's number of training examples n, and the subset it was taken of.
    held: Option<(usize, usize, usize)>,
    /// Where rows were appended to the run's training examples ([`Dataset::appended_copy`]):
    /// the first appended row (the run's own examples before it) and how many.
    appended: Option<(usize, usize)>,
}

/// What a model's examples are made from, as its file records it, so that `dpgd predict` reads
/// new examples exactly as training and `dpgd eval` did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum InputForm {
    /// Images of bytes 0–255 (IDX files, or CSV rows of whole numbers), scaled to [0, 1] before
    /// normalisation.
    #[default]
    Pixels,
    /// The named feature columns of a CSV file, as numbers (normalised as they are).
    Columns {
        /// The columns' names, in the order of an example's values.
        names: Vec<String>,
    },
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

/// The class count when `data.classes` is not given: 1 + the largest test label (public data,
/// so the architecture it sets is not chosen by the training data) — refused when the test
/// labels leave more than half of those classes empty, as one corrupt label (255 among digits)
/// would: the model would silently get hundreds of classes that never occur.
fn derived_classes(test_labels: &[u8]) -> std::result::Result<usize, String> {
    let mut seen = [false; 256];
    test_labels.iter().for_each(|&y| seen[usize::from(y)] = true);
    let classes = 1 + test_labels.iter().copied().max().map_or(0, usize::from);
    let present = seen[..classes].iter().filter(|&&s| s).count();
    if classes - present > classes / 2 {
        let (i, largest) =
            test_labels.iter().enumerate().max_by_key(|&(i, &y)| (y, usize::MAX - i)).map_or((0, 0), |(i, &y)| (i, y));
        return Err(format!(
            "the class count would be {classes} (1 + the largest test label, {largest} at example {i}), but only \
             {present} of those classes occur in the test labels: a corrupt label, or labels that are not 0, 1, 2, …; \
             fix the label, or set data.classes to the number of classes"
        ));
    }
    Ok(classes)
}

impl Dataset {
    /// Reads the four MNIST-format files from `dir` — images `(n, H, W)` or `(n, H, W, C)`
    /// (channels last, as CIFAR-style arrays are stored; kept channel-major in memory), labels
    /// `(n)`, unsigned bytes — checking shapes, counts and labels, and fingerprinting each file
    /// (SHA-256 of its uncompressed content). The class count is `classes` when given, else
    /// 1 + the largest *test* label: public data, so the architecture it sets is not chosen by
    /// the training data (a training label outside it is refused, and so are test labels that
    /// leave more than half of the classes so derived empty).
    ///
    /// # Errors
    /// [`Error::Data`] naming the file and the problem (missing, malformed, truncated, an empty
    /// training set, images of size 0, labels out of range, files that do not belong together).
    pub fn load(dir: &Path, classes: Option<usize>) -> Result<Self> {
        Self::load_with_label(dir, classes, csv::DEFAULT_LABEL_COLUMN)
    }

    /// As [`load`](Self::load); a folder without the IDX files but with `train.csv` and
    /// `test.csv` is read as CSV ([`csv::read`]), its labels in column `label_column`.
    ///
    /// # Errors
    /// As [`load`](Self::load) and [`csv::read`].
    pub fn load_with_label(dir: &Path, classes: Option<usize>, label_column: &str) -> Result<Self> {
        Self::load_csv_skipping(dir, classes, label_column, &[])
    }

    /// As [`load_with_label`](Self::load_with_label), skipping the CSV columns `ignore` (neither
    /// features nor the label: an id, a per-example budget) in both files wherever present.
    ///
    /// # Errors
    /// As [`load_with_label`](Self::load_with_label).
    pub fn load_csv_skipping(
        dir: &Path,
        classes: Option<usize>,
        label_column: &str,
        ignore: &[String],
    ) -> Result<Self> {
        let mut fingerprints = Vec::with_capacity(4);
        let is_csv = locate(dir, FILES[0]).is_err() && dir.join(csv::FILES[0]).is_file();
        let mut columns = None;
        let (test, test_labels_path) = if is_csv {
            let (split, path, names) = read_csv_split(dir, csv::FILES[1], (label_column, ignore), &mut fingerprints)?;
            columns = Some(names);
            (split, path)
        } else {
            read_split(dir, FILES[2], FILES[3], &mut fingerprints)?
        };
        let classes = match classes {
            Some(c) => c,
            None => derived_classes(&test.labels)
                .map_err(|message| Error::Data { path: test_labels_path.clone(), message })?,
        };
        let (train, train_labels_path) = if is_csv {
            let (split, path, names) = read_csv_split(dir, csv::FILES[0], (label_column, ignore), &mut fingerprints)?;
            if Some(&names) != columns.as_ref() {
                return Err(Error::Data {
                    path: test_labels_path,
                    message: format!(
                        "its feature columns {:?} are not {}'s {names:?}: both files need the same columns in the \
                         same order",
                        columns.unwrap_or_default(),
                        csv::FILES[0]
                    ),
                });
            }
            (split, path)
        } else {
            read_split(dir, FILES[0], FILES[1], &mut fingerprints)?
        };
        let per_split = fingerprints.len() / 2;
        fingerprints.rotate_right(per_split); // training files first
        for (split, path) in [(&train, &train_labels_path), (&test, &test_labels_path)] {
            if let Some((i, &y)) = split.labels.iter().enumerate().find(|&(_, &y)| usize::from(y) >= classes) {
                return Err(Error::Data {
                    path: path.clone(),
                    message: format!(
                        "label {y} of example {i} is not a class in 0..{classes} (data.classes, or 1 + the largest \
                         test label): the labels are corrupt or mislabelled, or set data.classes"
                    ),
                });
            }
        }
        if classes < 2 {
            return Err(Error::Data {
                path: test_labels_path,
                message: format!("{classes} class: a classifier needs at least 2 (set data.classes)"),
            });
        }
        if train.is_empty() {
            return Err(Error::Data {
                path: if is_csv { dir.join(csv::FILES[0]) } else { locate(dir, FILES[0])? },
                message: "the training set has 0 examples: there is nothing to train on".into(),
            });
        }
        if train.shape() != test.shape() {
            return Err(Error::Data {
                path: dir.into(),
                message: format!(
                    "training examples are {:?} (channels, height, width) but test examples {:?}",
                    train.shape(),
                    test.shape()
                ),
            });
        }
        Ok(Self {
            train,
            test,
            dir: dir.into(),
            fingerprints,
            classes,
            features: None,
            columns,
            held: None,
            appended: None,
        })
    }

    /// A dataset held in memory (for library users whose data are not IDX files): the same
    /// checks as [`load`](Self::load) — sizes, shapes, labels below the class count (given, or
    /// 1 + the largest test label) — and each array fingerprinted (SHA-256 of its bytes, so a
    /// resumed run refuses data that changed). `dir` names where the data came from in errors.
    ///
    /// ```
    /// use dpgd::data::{Dataset, Split};
    /// // Four 2 × 2 grey images of two classes, and two test images.
    /// let train = Split { images: vec![0, 0, 0, 0, 255, 255, 255, 255, 10, 0, 0, 10, 250, 255, 255, 250],
    ///                     features: vec![], labels: vec![0, 1, 0, 1], rows: 2, cols: 2, channels: 1 };
    /// let test = Split { images: vec![5, 5, 5, 5, 240, 240, 240, 240], features: vec![],
    ///                    labels: vec![0, 1], rows: 2, cols: 2, channels: 1 };
    /// let data = Dataset::in_memory(train, test, None, "my-array".as_ref()).unwrap();
    /// assert_eq!((data.shape(), data.classes()), ([1, 2, 2], 2));
    /// ```
    ///
    /// # Errors
    /// [`Error::Data`] naming `dir`: arrays whose lengths do not match the shape and labels, an
    /// empty training set, train and test shapes that differ, labels outside the classes.
    pub fn in_memory(train: Split, test: Split, classes: Option<usize>, dir: &Path) -> Result<Self> {
        let bad = |message: String| Error::Data { path: dir.into(), message };
        for (name, s) in [("training", &train), ("test", &test)] {
            let expected = s.labels.len().checked_mul(s.pixels());
            let held = if s.features.is_empty() { s.images.len() } else { s.features.len() };
            if s.pixels() == 0 || expected != Some(held) || (!s.features.is_empty() && !s.images.is_empty()) {
                return Err(bad(format!(
                    "the {name} split has {} values for {} labels of shape {:?}: they do not belong together",
                    s.images.len(),
                    s.labels.len(),
                    s.shape()
                )));
            }
        }
        let classes = match classes {
            Some(c) => c,
            None => derived_classes(&test.labels).map_err(|m| bad(format!("the test labels: {m}")))?,
        };
        if classes < 2 {
            return Err(bad(format!("{classes} class: a classifier needs at least 2")));
        }
        for (name, s) in [("training", &train), ("test", &test)] {
            if let Some((i, &y)) = s.labels.iter().enumerate().find(|&(_, &y)| usize::from(y) >= classes) {
                return Err(bad(format!("{name} label {y} of example {i} is not a class in 0..{classes}")));
            }
        }
        if train.is_empty() || train.shape() != test.shape() {
            return Err(bad(format!(
                "{} training examples of shape {:?} and test examples of shape {:?}: need at least one training \
                 example and one shape",
                train.len(),
                train.shape(),
                test.shape()
            )));
        }
        let fingerprint = |file: &str, bytes: &[u8]| Fingerprint {
            file: file.into(),
            sha256: idx::hex(&<sha2::Sha256 as sha2::Digest>::digest(bytes)),
        };
        let fingerprints = vec![
            fingerprint("train-images (in memory)", &[train.images.as_slice(), &f32_bytes(&train.features)].concat()),
            fingerprint("train-labels (in memory)", &train.labels),
            fingerprint("test-images (in memory)", &[test.images.as_slice(), &f32_bytes(&test.features)].concat()),
            fingerprint("test-labels (in memory)", &test.labels),
        ];
        Ok(Self {
            train,
            test,
            dir: dir.into(),
            fingerprints,
            classes,
            features: None,
            columns: None,
            held: None,
            appended: None,
        })
    }

    /// The shape of one example, `[channels, height, width]`.
    #[must_use]
    pub fn shape(&self) -> [usize; 3] {
        self.train.shape()
    }

    /// The number of classes (see [`load`](Self::load)).
    #[must_use]
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// The normalisation to use when the config gives none, chosen from the *test* split only
    /// ([`public_normalize`]): nothing about the training data may choose it, since it is
    /// published (config, model file, θ) and two neighbouring training sets must give the same.
    /// Data transformed into features ([`features`]) get none (mean 0, std 1): they are
    /// normalised per example by the transform itself (or, with `groups = 0`, not at all), and a
    /// constant keeps the default independent of the data.
    #[must_use]
    pub fn default_normalize(&self) -> Normalize {
        if self.features.is_some() {
            return Normalize::all(0.0, 1.0);
        }
        let test_images = self.fingerprints.iter().find(|f| f.file.starts_with(FILES[2])).map(|f| f.sha256.as_str());
        public_normalize(&self.test, test_images)
    }

    /// What the examples are made from (pixels, or named CSV columns).
    #[must_use]
    pub fn input_form(&self) -> InputForm {
        match &self.columns {
            Some(names) => InputForm::Columns { names: names.clone() },
            None => InputForm::Pixels,
        }
    }

    /// The feature transform the splits hold the output of, if any.
    #[must_use]
    pub fn features(&self) -> Option<&features::Features> {
        self.features.as_ref().map(|f| &f.transform)
    }

    /// The feature transform the splits hold the features of, with the shape of the images it
    /// was applied to (`None`: the splits hold the examples themselves).
    #[must_use]
    pub fn feature_input(&self) -> Option<&features::FeatureInput> {
        self.features.as_ref()
    }

    /// This dataset with both splits replaced by the features of `transform` (a fixed,
    /// data-independent transform of each example), from the cache in `cache` when it holds
    /// them ([`features::Features::transform_splits`]).
    ///
    /// # Errors
    /// As [`features::Features::apply`].
    pub fn with_features(self, transform: &features::Features, cache: Option<&Path>) -> Result<Self> {
        let (train, test, input) = transform.transform_splits((self.train, self.test), &self.fingerprints, cache)?;
        Ok(Self { train, test, features: Some(input), ..self })
    }

    /// Keeps in memory only the training examples that rank `rank` of `ranks` of a
    /// data-parallel run trains on ([`crate::collective::shard`] of the first `subset`, all for
    /// 0: the run's `data.train_subset`), and drops the rest; the test split and the files'
    /// fingerprints stay whole. A dataset that holds a shard already is returned as it is.
    #[must_use]
    pub fn keep_shard(mut self, subset: usize, ranks: usize, rank: usize) -> Self {
        if self.held.is_none() {
            // Appended rows are the run's too: its training examples are the whole split.
            let n = self.train.head(if self.appended.is_some() { 0 } else { subset }).len();
            let range = crate::collective::shard(n, ranks, rank);
            self.train = self.train.slice(range.clone());
            self.held = Some((range.start, n, subset));
        }
        self
    }

    /// The run's training examples (the first `subset`, all for 0) without those `hold_out`
    /// chooses, and the held-out examples: the dataset a run trains on, and its validation
    /// split. The held-out positions' hash joins the files' fingerprints, so a run's identity
    /// records what it trained on.
    ///
    /// # Errors
    /// As [`HoldOut::positions`]; a dataset that holds one rank's shard only.
    pub fn hold_out(mut self, subset: usize, hold_out: &HoldOut) -> Result<(Self, Split)> {
        if self.held.is_some() || self.appended.is_some() {
            return Err(Error::config(
                "data.hold_out",
                "hold out examples before keeping one rank's shard or appending an audit's canaries",
            ));
        }
        let n = self.train.head(subset).len();
        let positions = hold_out.positions(n)?;
        let (held, rest) = partition(&self.train, n, &positions);
        let bytes: Vec<u8> = positions.iter().flat_map(|&p| (p as u64).to_le_bytes()).collect();
        self.fingerprints.push(Fingerprint {
            file: format!("held out: {} of the first {n} training examples, seed {}", hold_out.examples, hold_out.seed),
            sha256: idx::hex(&<sha2::Sha256 as sha2::Digest>::digest(&bytes)),
        });
        self.train = rest;
        Ok((self, held))
    }

    /// A copy of the run's training examples (the first `subset`, all for 0) with `rows`
    /// appended after them (an audit's input canaries), the test split and `fingerprint`
    /// joining the files' so that a run's identity records them.
    ///
    /// # Errors
    /// [`Error::Data`]: rows of another shape or form (bytes or numbers) than the training
    /// examples', labels outside the classes, or a dataset that holds one rank's shard or has
    /// rows appended already.
    pub fn appended_copy(&self, subset: usize, rows: &Split, fingerprint: Fingerprint) -> Result<Self> {
        let bad = |message: String| Error::Data { path: self.dir.clone(), message };
        if self.held.is_some() || self.appended.is_some() {
            return Err(
                bad("rows are appended to the whole training set once, before keeping one rank's shard".into()),
            );
        }
        let same_form = rows.images.is_empty() == self.train.images.is_empty();
        if rows.shape() != self.train.shape() || !same_form {
            return Err(bad(format!(
                "appended rows of shape {:?} ({}) for training examples of shape {:?} ({})",
                rows.shape(),
                if rows.images.is_empty() { "numbers" } else { "bytes" },
                self.train.shape(),
                if self.train.images.is_empty() { "numbers" } else { "bytes" }
            )));
        }
        if rows.labels.iter().any(|&y| usize::from(y) >= self.classes) {
            return Err(bad(format!("an appended row's label is not a class in 0..{}", self.classes)));
        }
        let first = self.train.head(subset).len();
        let mut train = self.train.slice(0..first);
        train.images.extend_from_slice(&rows.images);
        train.features.extend_from_slice(&rows.features);
        train.labels.extend_from_slice(&rows.labels);
        let mut fingerprints = self.fingerprints.clone();
        fingerprints.push(fingerprint);
        Ok(Self {
            train,
            test: self.test.clone(),
            dir: self.dir.clone(),
            fingerprints,
            classes: self.classes,
            features: self.features.clone(),
            columns: self.columns.clone(),
            held: None,
            appended: Some((first, rows.len())),
        })
    }

    /// Where rows were appended ([`appended_copy`](Self::appended_copy)): the first appended
    /// row and how many (`None`: none).
    #[must_use]
    pub fn appended(&self) -> Option<(usize, usize)> {
        self.appended
    }

    /// Where the training split holds one rank's shard ([`keep_shard`](Self::keep_shard)):
    /// its first example, the run's number of training examples, and the `subset` it was
    /// given (`None`: it holds them all).
    #[must_use]
    pub fn held_shard(&self) -> Option<(usize, usize, usize)> {
        self.held
    }

    /// The SHA-256 fingerprints of the four files, training images first.
    #[must_use]
    pub fn fingerprints(&self) -> &[Fingerprint] {
        &self.fingerprints
    }
}

/// Reads one split (images and labels files), checking that they belong together; returns it
/// with its labels file, and pushes both files' fingerprints.
fn read_split(dir: &Path, images: &str, labels: &str, fingerprints: &mut Vec<Fingerprint>) -> Result<(Split, PathBuf)> {
    let (ip, lp) = (locate(dir, images)?, locate(dir, labels)?);
    let (mut split, im_sha) = read_images_hashed(&ip)?;
    let lb = idx::read(&lp, 1)?;
    let n = split.labels.len();
    if n != lb.dims[0] {
        return Err(Error::Data {
            path: lp,
            message: format!(
                "{} labels for {n} images in {}: the files do not belong together",
                lb.dims[0],
                ip.display()
            ),
        });
    }
    for (path, sha) in [(&ip, im_sha), (&lp, lb.sha256)] {
        let name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        fingerprints.push(Fingerprint { file: name, sha256: sha });
    }
    split.labels = lb.data;
    Ok((split, lp))
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Reads one CSV split and pushes its fingerprint.
fn read_csv_split(
    dir: &Path,
    file: &str,
    (label, ignore): (&str, &[String]),
    fingerprints: &mut Vec<Fingerprint>,
) -> Result<(Split, PathBuf, Vec<String>)> {
    let path = dir.join(file);
    let csv::Table { split, sha256, columns } = csv::read_skipping(&path, label, ignore)?;
    fingerprints.push(Fingerprint { file: file.into(), sha256 });
    Ok((split, path, columns))
}

/// Reads an IDX file of images, `(n, H, W)` or `(n, H, W, C)` (channels last), into a
/// [`Split`] with channel-major examples and all labels 0 (for prediction).
///
/// # Errors
/// [`Error::Data`] naming the file: not IDX images, empty images, or more channels than pixels
/// (an `(n, C, H, W)` file read as channels last).
pub fn read_images(path: &Path) -> Result<Split> {
    read_images_hashed(path).map(|(s, _)| s)
}

fn read_images_hashed(path: &Path) -> Result<(Split, String)> {
    let im = idx::read_any(path, &[3, 4])?;
    let (n, h, w) = (im.dims[0], im.dims[1], im.dims[2]);
    let c = im.dims.get(3).copied().unwrap_or(1);
    let bad = |message: String| Error::Data { path: path.into(), message };
    if h == 0 || w == 0 || c == 0 {
        return Err(bad(format!("images of {h}x{w}x{c}: nothing to learn from")));
    }
    if c > 1 && c > h * w {
        return Err(bad(format!("{c} channels on {h}x{w} images: images are read as (n, height, width, channels)")));
    }
    let images = if c == 1 { im.data } else { channels_first(&im.data, h * w, c) };
    Ok((Split { images, features: Vec::new(), labels: vec![0; n], rows: h, cols: w, channels: c }, im.sha256))
}

/// `(n, H·W, C)` bytes to `(n, C, H·W)`.
fn channels_first(data: &[u8], hw: usize, c: usize) -> Vec<u8> {
    let mut out = vec![0u8; data.len()];
    for (src, dst) in data.chunks_exact(hw * c).zip(out.chunks_exact_mut(hw * c)) {
        for (k, v) in src.iter().enumerate() {
            dst[(k % c) * hw + k / c] = *v;
        }
    }
    out
}

/// The default normalisation, a function of public data only — the test split and the SHA-256
/// of its images file — and never of the training split (which it cannot see): a known
/// dataset's published constants ([`fetch::KNOWN`]) when the test images are that dataset's,
/// else the mean and std of the test split's pixels (std 1 for a constant split). dpgd treats
/// the test split as public: test accuracy is released without noise.
#[must_use]
pub fn public_normalize(test: &Split, test_images_sha256: Option<&str>) -> Normalize {
    let known = known::KNOWN.iter().find(|k| {
        k.sha256.is_some_and(|h| h.iter().any(|(stem, sha)| *stem == FILES[2] && Some(*sha) == test_images_sha256))
    });
    if let Some(k) = known {
        return k.normalize.clone();
    }
    // Per channel, in the units normalisation expects: bytes over 255, features as they are.
    let (channels, plane) = (test.channels.max(1), (test.rows * test.cols).max(1));
    let mut moments = vec![(0.0f64, 0.0f64, 0usize); channels];
    let mut add = |k: usize, x: f64| {
        let m = &mut moments[(k / plane) % channels];
        (m.0, m.1, m.2) = (m.0 + x, m.1 + x * x, m.2 + 1);
    };
    test.images.iter().enumerate().for_each(|(k, &p)| add(k, f64::from(p) / 255.0));
    test.features.iter().enumerate().for_each(|(k, &x)| add(k, f64::from(x)));
    let (mean, std): (Vec<f32>, Vec<f32>) = moments
        .iter()
        .map(|&(sum, squares, n)| {
            let n = n.max(1) as f64;
            let mean = sum / n;
            let std = (squares / n - mean * mean).max(0.0).sqrt();
            (mean as f32, if std > 1e-6 { std as f32 } else { 1.0 })
        })
        .unzip();
    match (mean.as_slice(), std.as_slice()) {
        ([m], [s]) => Normalize::all(*m, *s),
        _ => Normalize { mean: Channels::Each(mean), std: Channels::Each(std) },
    }
}

/// Training examples held out of training, for validation (a private hyperparameter search
/// scores its candidates on them): `examples` of the run's training examples, chosen by a
/// permutation drawn from `seed`. Both are public: which positions are held out depends on
/// neither the data nor anything secret, so two neighbouring datasets hold out the same
/// positions, and the one example they differ in is either trained on or held out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldOut {
    /// How many training examples are held out.
    pub examples: usize,
    /// The seed of the permutation that chooses them.
    #[serde(default)]
    pub seed: u64,
}

impl HoldOut {
    /// The positions held out of `n` training examples, ascending: the first `examples` of a
    /// Fisher–Yates shuffle of 0..n driven by ChaCha20 from `seed`.
    ///
    /// # Errors
    /// [`Error::Config`] naming `data.hold_out.examples` if it is 0 or leaves no training
    /// example.
    pub fn positions(&self, n: usize) -> Result<Vec<usize>> {
        use rand::{RngExt, SeedableRng};
        if self.examples == 0 || self.examples >= n {
            return Err(Error::config(
                "data.hold_out.examples",
                format!(
                    "{} of {n} training examples: hold out at least 1 and leave at least 1 to train on (e.g. {})",
                    self.examples,
                    (n / 10).max(1)
                ),
            ));
        }
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(self.seed);
        let mut order: Vec<usize> = (0..n).collect();
        for i in 0..self.examples {
            let j = rng.random_range(i..n);
            order.swap(i, j);
        }
        order.truncate(self.examples);
        order.sort_unstable();
        Ok(order)
    }

    /// The original row (position among the `total` training examples it is taken from) of
    /// each of the `total − examples` examples a run trains on, ascending: the rows
    /// [`positions`](Self::positions) leaves. What an example carries through the hold-out,
    /// so that anything keyed by its row (its tier of personalized budgets) stays its own.
    ///
    /// # Errors
    /// As [`positions`](Self::positions).
    pub fn kept_rows(&self, total: usize) -> Result<Vec<usize>> {
        let held = self.positions(total)?;
        let mut next = held.iter().peekable();
        Ok((0..total)
            .filter(|&i| {
                let is_held = next.peek() == Some(&&i);
                if is_held {
                    next.next();
                }
                !is_held
            })
            .collect())
    }
}

/// The first `n` examples of `split`: those at `positions` (ascending) and the rest, each in
/// their order.
fn partition(split: &Split, n: usize, positions: &[usize]) -> (Split, Split) {
    let px = split.pixels();
    let empty = || Split { images: Vec::new(), features: Vec::new(), labels: Vec::new(), ..*split };
    let (mut held, mut rest) = (empty(), empty());
    let mut next = positions.iter().peekable();
    for i in 0..n.min(split.len()) {
        let out = if next.peek() == Some(&&i) {
            next.next();
            &mut held
        } else {
            &mut rest
        };
        if !split.images.is_empty() {
            out.images.extend_from_slice(&split.images[i * px..(i + 1) * px]);
        }
        if !split.features.is_empty() {
            out.features.extend_from_slice(&split.features[i * px..(i + 1) * px]);
        }
        out.labels.push(split.labels[i]);
    }
    (held, rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn split(n: usize) -> Split {
        Split {
            images: (0..n * 4).map(|v| (v % 251) as u8).collect(),
            features: Vec::new(),
            labels: (0..n).map(|i| (i % 10) as u8).collect(),
            rows: 2,
            cols: 2,
            channels: 1,
        }
    }

    proptest! {
        /// The held-out positions are `examples` distinct positions below n, ascending and the
        /// same for the same seed; the two parts partition the first n examples, each in order.
        #[test]
        fn a_hold_out_partitions_the_training_examples(n in 2usize..300, share in 0.0f64..1.0, seed in any::<u64>()) {
            let examples = ((n - 1) as f64 * share) as usize + 1;
            let h = HoldOut { examples: examples.min(n - 1), seed };
            let p = h.positions(n).unwrap();
            prop_assert_eq!(p.len(), h.examples);
            prop_assert!(p.windows(2).all(|w| w[0] < w[1]) && p.iter().all(|&i| i < n));
            prop_assert_eq!(&p, &h.positions(n).unwrap());
            let s = split(n + 3);
            let (held, rest) = partition(&s, n, &p);
            prop_assert_eq!(held.len() + rest.len(), n);
            let rest_positions: Vec<usize> = (0..n).filter(|i| p.binary_search(i).is_err()).collect();
            for (part, positions) in [(&held, &p), (&rest, &rest_positions)] {
                for (j, &i) in positions.iter().enumerate() {
                    prop_assert_eq!(part.labels[j], s.labels[i]);
                    prop_assert_eq!(&part.images[j * 4..j * 4 + 4], &s.images[i * 4..i * 4 + 4]);
                }
            }
        }
    }

    #[test]
    fn a_hold_out_of_nothing_or_everything_is_refused_by_field() {
        for examples in [0, 10, 11] {
            let err = HoldOut { examples, seed: 0 }.positions(10).unwrap_err().to_string();
            assert!(err.contains("data.hold_out.examples"), "{err}");
        }
        let data = Dataset::in_memory(split(20), split(5), Some(10), "mem".as_ref()).unwrap();
        let (train, held) = data.hold_out(12, &HoldOut { examples: 2, seed: 1 }).unwrap();
        assert_eq!((train.train.len(), held.len()), (10, 2));
        assert!(train.fingerprints().last().unwrap().file.contains("held out: 2 of the first 12"));
    }
}
