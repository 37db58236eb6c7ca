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
pub mod data;
pub mod device;
pub mod error;
pub mod memory;
pub mod model;
pub mod noise;
pub mod per_example;
pub mod plot;
pub mod sweep;
pub mod train;

pub use error::{Error, Result};
