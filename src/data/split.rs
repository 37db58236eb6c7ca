//! A split of a dataset in memory (images as bytes, or features as numbers, with their labels),
//! and borrowed runs of its examples.

use super::normalize::Normalize;

/// One split of an image-classification dataset, stored as bytes (normalised on the fly so
/// the dataset costs one byte per value in memory).
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// Byte values, `n × channels × rows × cols` (channel-major within an example, as the
    /// models read them); empty for real-valued data.
    pub images: Vec<u8>,
    /// Real-valued features, `n × channels × rows × cols` (CSV data); empty for byte images.
    pub features: Vec<f32>,
    /// Labels, `n`.
    pub labels: Vec<u8>,
    /// Image height.
    pub rows: usize,
    /// Image width.
    pub cols: usize,
    /// Channels (1 for grey images).
    pub channels: usize,
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
    /// Values per example (`channels × rows × cols`).
    #[must_use]
    pub fn pixels(&self) -> usize {
        self.channels * self.rows * self.cols
    }
    /// The shape of one example, `[channels, rows, cols]`.
    #[must_use]
    pub fn shape(&self) -> [usize; 3] {
        [self.channels, self.rows, self.cols]
    }
    /// Writes examples `range` normalised by `norm` into `out` (`len × pixels`), as
    /// [`Examples::normalised_into`] on the whole split.
    pub fn normalised_into(&self, range: std::ops::Range<usize>, norm: &Normalize, out: &mut [f32]) {
        self.head(0).normalised_into(range, norm, out);
    }
    /// A borrowed view of the first `n` examples (all of them if `n` is 0 or larger than the
    /// split): training and evaluation read the dataset through views, so it is held once.
    #[must_use]
    pub fn head(&self, n: usize) -> Examples<'_> {
        let n = if n == 0 { self.len() } else { n.min(self.len()) };
        let values = n * self.pixels();
        Examples {
            images: &self.images[..values.min(self.images.len())],
            features: &self.features[..values.min(self.features.len())],
            labels: &self.labels[..n],
            px: self.pixels(),
            plane: self.rows * self.cols,
        }
    }
    /// The first `n` examples (all of them if `n` is 0 or larger than the split).
    #[must_use]
    pub fn truncated(mut self, n: usize) -> Self {
        if n > 0 && n < self.len() {
            let values = n * self.pixels();
            self.images.truncate(values);
            self.features.truncate(values);
            self.labels.truncate(n);
        }
        self
    }

    /// A copy of the examples `range` (clamped to the split): e.g. a public slice of a dataset
    /// and the private rest, disjoint.
    #[must_use]
    pub fn slice(&self, range: std::ops::Range<usize>) -> Self {
        let (lo, hi) = (range.start.min(self.len()), range.end.min(self.len()));
        let (lo, hi) = (lo, hi.max(lo));
        let px = self.pixels();
        let part = |v: &[u8]| if v.is_empty() { Vec::new() } else { v[lo * px..hi * px].to_vec() };
        Self {
            images: part(&self.images),
            features: if self.features.is_empty() { Vec::new() } else { self.features[lo * px..hi * px].to_vec() },
            labels: self.labels[lo..hi].to_vec(),
            ..*self
        }
    }
}

/// A borrowed run of examples of a [`Split`] (see [`Split::head`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Examples<'a> {
    images: &'a [u8],
    features: &'a [f32],
    labels: &'a [u8],
    px: usize,
    /// Values per channel (`rows × cols`).
    plane: usize,
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
    /// Values per example.
    #[must_use]
    pub fn pixels(&self) -> usize {
        self.px
    }
    /// The labels.
    #[must_use]
    pub fn labels(&self) -> &[u8] {
        self.labels
    }
    /// The examples `range` of these (clamped to them), in order: e.g. one rank's shard of a
    /// data-parallel run's training examples.
    #[must_use]
    pub fn range(&self, range: std::ops::Range<usize>) -> Self {
        let hi = range.end.min(self.len());
        let lo = range.start.min(hi);
        let cut = |len: usize| (lo * self.px).min(len)..(hi * self.px).min(len);
        Self {
            images: &self.images[cut(self.images.len())],
            features: &self.features[cut(self.features.len())],
            labels: &self.labels[lo..hi],
            ..*self
        }
    }
    /// Writes examples `range` normalised by `norm` into `out` (`len × pixels`): bytes as
    /// (x/255 − mean)/std, real-valued features as (x − mean)/std, with channel c's mean and std.
    pub fn normalised_into(&self, range: std::ops::Range<usize>, norm: &Normalize, out: &mut [f32]) {
        let values = range.start * self.px..range.end * self.px;
        let plane = self.plane.max(1);
        let channels = self.px / plane;
        let affine: Vec<(f32, f32)> = (0..channels).map(|c| norm.affine(c, self.features.is_empty())).collect();
        if self.features.is_empty() {
            let src = &self.images[values];
            for (k, (o, p)) in out.chunks_mut(plane).zip(src.chunks(plane)).enumerate() {
                let (scale, shift) = affine[k % channels];
                for (o, &p) in o.iter_mut().zip(p) {
                    *o = f32::from(p) * scale - shift;
                }
            }
        } else {
            let src = &self.features[values];
            for (k, (o, x)) in out.chunks_mut(plane).zip(src.chunks(plane)).enumerate() {
                let (scale, shift) = affine[k % channels];
                for (o, &x) in o.iter_mut().zip(x) {
                    *o = x * scale - shift;
                }
            }
        }
    }
}
