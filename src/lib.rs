//! # dpgd — differentially private gradient descent with individual privacy accounting
//!
//! dpgd trains models by full-batch private gradient descent and accounts privacy *per
//! example*, following Feldman & Zrnic, "Individual Privacy Accounting via a Rényi Filter"
//! (NeurIPS 2021, [arXiv:2008.11193](https://arxiv.org/abs/2008.11193)). Each step clips every per-example
//! gradient to min(‖g‖, C, √(B_norm − spentᵢ)), adds N(0, σ²C²I) to the sum and steps; a
//! per-example ledger drops examples whose budget is spent. The whole run is
//! B_norm/(2σ²C²)-zCDP (and √B_norm/(σC)-Gaussian DP) however many steps it takes.
//!
//! ## Tour
//!
//! * [`accounting`] — privacy measures, conversions to (ε, δ), noise calibration, filters
//!   (including the individual filter). Independent of burn; a product of its own.
//!
//! * [`nn`] — burn layers for YOUR model: write it as for burn, with `dpgd::nn`'s `Linear`,
//!   `Conv2d`, `GroupNorm`, … and train it privately on a burn device (CPU: flex, ndarray) through
//!   [`per_example::BurnEngine`] and [`train::Run::train_model`] (`examples/custom_model.rs`).
//!
//! * [`per_example`] — per-example gradients behind one trait, with two engines: the fast
//!   CPU engine for the config's built-in layer kinds, and the burn engine.
//!
//! * [`train`] — the trainer: a config, a dataset (IDX files, or arrays in memory:
//!   [`data::Dataset::in_memory`]), a run folder whose `publishable/` half is safe to publish.
//!
//! * [`collective`] — data-parallel training on several processes (MPI with the `mpi` feature):
//!   [`train::Run::ranks`] gives the one-process run's outputs bit for bit on any number of ranks.
//!
//! Train privately with individual filtering on data held in memory, and read the guarantee:
//!
//! ```
//! use dpgd::data::{Dataset, Split};
//! use dpgd::train::{RunOptions, Silent, TrainConfig};
//! # fn main() -> dpgd::Result<()> {
//! // 200 grey 4 × 4 images of two classes (dark and bright), and 40 test images.
//! let split = |n: usize| {
//!     let labels: Vec<u8> = (0..n).map(|i| (i % 2) as u8).collect();
//!     let images = labels.iter().flat_map(|&y| [40 + 160 * y; 16]).collect();
//!     Split { images, features: vec![], labels, rows: 4, cols: 4, channels: 1 }
//! };
//! let data = Dataset::in_memory(split(200), split(40), None, "in-memory".as_ref())?;
//! let config = TrainConfig::from_toml(
//!     "name = \"demo\"\n[model]\npreset = \"logistic\"\n\
//!      [privacy]\nmethod = \"filtered\"\nepsilon = 2.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 10\n\
//!      [train]\nlr = 1.0\nmax_steps = 20\n",
//!     &[],
//! )?
//! .validate()?;
//! let run = tempfile::tempdir().map_err(|e| dpgd::Error::Environment(e.to_string()))?;
//! let summary = dpgd::train::run(&config, &data, run.path(), &RunOptions::default(), &mut Silent)?;
//! let privacy = summary.privacy.expect("a finished run says what it is worth");
//! assert!(privacy.private, "OS-keyed noise: the run is private");
//! println!("{}", privacy.summary); // (2, 1e-5)-DP via gaussian-exact under zero-out neighbours
//! # Ok(()) }
//! ```
//!
//! ```
//! use dpgd::accounting::{Conversion, PrivateGd};
//! // σ = 8, 100 worst-case steps: ε at δ = 1e-5 under each conversion.
//! let run = PrivateGd::new(8.0, 1.0, 100.0).unwrap();
//! for method in Conversion::ALL {
//!     println!("{method}: ε = {:.4}", run.epsilon(1e-5, method).unwrap());
//! }
//! ```

#![warn(missing_docs)]

pub use dpgd_accounting as accounting;
pub mod arch;
pub mod audit;
pub mod clip;
pub mod collective;
pub mod cube;
pub mod data;
pub mod device;
pub mod error;
pub mod files;
mod kernels;
pub mod memory;
pub mod model;
pub mod nn;
pub mod noise;
pub mod per_example;
pub mod plot;
pub mod simd;
pub mod sweep;
pub mod train;

pub use error::{Error, Result};
