//! The datasets dpgd knows by name: where to find them, their published SHA-256s and their
//! public normalisation constants.

use super::normalize::Normalize;

/// SHA-256 of the *uncompressed* official MNIST files (LeCun, Cortes & Burges).
pub const MNIST_SHA256: [(&str, &str); 4] = [
    ("train-images-idx3-ubyte", "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"),
    ("train-labels-idx1-ubyte", "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"),
    ("t10k-images-idx3-ubyte", "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"),
    ("t10k-labels-idx1-ubyte", "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
];

/// SHA-256 of the *uncompressed* Fashion-MNIST files (Xiao, Rasul & Vollgraf 2017), as
/// repackaged by Debian (`dataset-fashion-mnist` 0.0~git20200523.55506a9, from
/// zalandoresearch/fashion-mnist at commit 55506a9).
pub const FASHION_MNIST_SHA256: [(&str, &str); 4] = [
    ("train-images-idx3-ubyte", "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"),
    ("train-labels-idx1-ubyte", "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"),
    ("t10k-images-idx3-ubyte", "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"),
    ("t10k-labels-idx1-ubyte", "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"),
];

/// A dataset the fetch step knows: where to look locally and which mirrors to try.
#[derive(Debug, Clone)]
pub struct Known {
    /// Name used on the command line and as the folder under `datasets/`.
    pub name: &'static str,
    /// System folders tried after `$DPGD_DATASETS/<name>` (relative paths are relative to the
    /// working directory).
    pub local: &'static [&'static str],
    /// Public mirrors (base URLs of the `.gz` files).
    pub mirrors: &'static [&'static str],
    /// Expected SHA-256 of the uncompressed files, when published.
    pub sha256: Option<&'static [(&'static str, &'static str); 4]>,
    /// Its normalisation: a public constant (MNIST's from the literature, Fashion-MNIST's from
    /// its public test split), never computed from the training data a run uses.
    pub normalize: Normalize,
}

/// The datasets `dpgd data fetch` knows by name.
pub static KNOWN: [Known; 2] = [
    Known {
        name: "mnist",
        local: &["/usr/share/datasets/mnist"],
        mirrors: &[
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "https://storage.googleapis.com/cvdf-datasets/mnist/",
        ],
        sha256: Some(&MNIST_SHA256),
        normalize: Normalize::MNIST,
    },
    Known {
        name: "fashion-mnist",
        local: &["/usr/share/datasets/fashion-mnist"],
        mirrors: &[
            "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        ],
        sha256: Some(&FASHION_MNIST_SHA256),
        // Mean and std of the 10,000 public test images' pixels in [0, 1].
        normalize: Normalize::all(0.2868, 0.3524),
    },
];
