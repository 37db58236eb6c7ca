//! # Privacy accounting, usable without training
//!
//! This module does not depend on burn: it is plain `f64` arithmetic, exact to the
//! tolerances stated below, and can be used on its own (the `dpgd account` CLI is a thin
//! layer over it).
//!
//! ## A short tour
//!
//! | type / function | what it implements | source |
//! |---|---|---|
//! | [`PureDp`], [`Zcdp`], [`GaussianDp`], [`Rdp`], [`ApproxDp`] | privacy guarantees as validated types | 001 Defs. 2.1–2.3; Dong, Roth & Su 2022 |
//! | [`Conversion`], [`ToApproxDp`] | zCDP / GDP / RDP → (ε, δ): `bun-steinke`, `cks`, `gaussian-exact`, and inverses | Bun & Steinke 2016 Prop. 1.3; Canonne, Kamath & Steinke 2020 Prop. 12; Balle & Wang 2018 Thm 8 |
//! | [`PrivateGd`], [`calibrate_sigma`] | the guarantee and the noise calibration of private GD with filtering | 001 Algorithm 3, Prop. 5.1 |
//! | [`filter::RenyiFilter`], [`filter::ZcdpFilter`], [`filter::MultiOrderRdpFilter`] | fully adaptive RDP composition | 001 Thm 4.3, Remark 4.4 |
//! | [`filter::IndividualFilter`] | the per-example ledger of individual privacy filtering | 001 Algorithm 2, Thm 4.5 |
//! | [`filter::RogersFilter`], [`filter::FzFilter`], [`filter::WhitehouseFilter`], [`filter::BasicFilter`] | (ε, δ)-DP filters for adaptively chosen parameters | 003 Thm 5.1; 001 Thm 4.8; 000 Thm 2 |
//! | [`session::PrivacySession`] | concurrent composition of interactive mechanisms under one filter or odometer | 004 |
//! | [`mechanism::GaussianMechanism`], [`mechanism::FilteredLinearQueries`] | Gaussian counts and sums; individually filtered linear queries | 001 §4.2, Cor. 4.7 |
//! | [`odometer::FilterOdometer`], [`odometer::MixtureOdometer`], [`odometer::StitchedOdometer`], [`odometer::RogersOdometer`] | time-uniform bounds on privacy loss | 000 Thm 3, Lemma 3; 003 Thm 6.2 |
//!
//! ```
//! use dpgd_accounting::{calibrate_sigma, ApproxDp, Conversion, PrivateGd, ToApproxDp, Zcdp};
//!
//! // A privacy calculator: what (ε, δ) does 0.05-zCDP give?
//! let z = Zcdp::new(0.05).unwrap();
//! let loose = z.epsilon(1e-5, Conversion::BunSteinke).unwrap();
//! let tight = z.epsilon(1e-5, Conversion::Cks).unwrap();
//! assert!(tight < loose);
//!
//! // Calibrate private GD with filtering for (0.5, 1e-5)-DP over 100 worst-case steps,
//! // with the tightest conversion valid for it (Gaussian DP).
//! let target = ApproxDp::new(0.5, 1e-5).unwrap();
//! let sigma = calibrate_sigma(target, 100.0, Conversion::GaussianExact).unwrap();
//! let run = PrivateGd::new(sigma, 1.0, 100.0).unwrap();
//! assert!(run.epsilon(1e-5, Conversion::GaussianExact).unwrap() <= 0.5);
//! // The paper's own conversion would need more noise for the same guarantee:
//! assert!(calibrate_sigma(target, 100.0, Conversion::BunSteinke).unwrap() > sigma);
//! ```
//!
//! ## Exactness
//!
//! Closed forms are evaluated directly; the `cks` optimum over α and every inverse are
//! solved by bisection on a proven bracket to relative tolerance
//! [`numeric::SOLVE_REL_TOL`] and return the conservative end (the answer never
//! understates privacy loss). Φ is computed from `erfc`, so δ down to 1e-300 keeps its
//! relative precision. Budgets are added with upward and subtracted with downward
//! rounding.

pub mod audit;
mod calibrate;
pub mod convert;
mod error;
pub mod filter;
mod measure;
pub mod mechanism;
mod neighbours;
pub mod numeric;
pub mod odometer;
pub mod sampling;
pub mod session;

pub use calibrate::{GaussianRelease, GdPlan, PrivateGd, calibrate_sigma};
pub use convert::{Conversion, ToApproxDp};
pub use error::{AccountingError, Result, non_negative, positive, probability};
pub use measure::{ApproxDp, GaussianDp, ProbabilisticDp, PureDp, Rdp, Zcdp};
pub use neighbours::Neighbours;
