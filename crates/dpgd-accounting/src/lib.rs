//! # dpgd-accounting
//!
//! Privacy accounting for differentially private gradient descent with individual privacy
//! accounting ([FZ21]) — and for any other mechanism whose privacy you need to add up,
//! convert, calibrate, stop in time, or check empirically. Privacy guarantees are types,
//! conversions to (ε, δ) never understate ε, budgets are enforced by filters that refuse
//! what does not fit, and everything is plain `f64` and integer arithmetic: no ML stack, no
//! unsafe code, no printing. It is the accounting core of the `dpgd` trainer, and a library of
//! its own:
//!
//! ```text
//! cargo add dpgd-accounting
//! ```
//!
//! | you want to | use | source |
//! |---|---|---|
//! | state a guarantee | [`PureDp`], [`Zcdp`], [`GaussianDp`], [`Rdp`], [`ApproxDp`], [`ProbabilisticDp`] | [FZ21, Defs. 2.1–2.3]; [BS16]; [DRS19]; [WRRW23, §4.1] |
//! | convert it to (ε, δ), or invert | [`ToApproxDp`], [`Conversion`] (`bun-steinke`, `cks`, `gaussian-exact`) | [BS16, Prop. 1.3]; [CKS20, Prop. 12]; [BW18, Thm 8] |
//! | account for DP-SGD (Poisson sampling) | [`event::RdpAccountant`] on [`event::DpEvent`]s, [`subsampled::rdp`], [`event::calibrate_sgd_sigma`] | [MTZ19, Sec. 3]; [Mir17]; [CKS20, Prop. 12] |
//! | … tighter, by its privacy loss distribution | [`event::PldAccountant`], [`pld`] | [KJPH21]; [DGKKM22] |
//! | calibrate private GD | [`GdPlan`], [`calibrate_sigma`], [`PrivateGd`], [`Neighbours`], [`GaussianRelease`] | [FZ21, Alg. 3, Prop. 5.1]; [ST22]; [KTH23, Thm 4.3] |
//! | stop before a budget is spent | [`filter`]: [`RenyiFilter`](filter::RenyiFilter), [`ZcdpFilter`](filter::ZcdpFilter), [`DpFilter`](filter::DpFilter) with the rules of [RRUV16], [FZ21], [WRRW23] | [FZ21, Thm 4.3]; [RRUV16, Thm 5.1]; [WRRW23, Thms 1–2] |
//! | track per-example budgets | [`IndividualFilter`](filter::IndividualFilter), [`FilteredLinearQueries`](mechanism::FilteredLinearQueries) | [FZ21, Alg. 2, Thm 4.5, Cor. 4.7] |
//! | bound the loss so far, no budget | [`odometer`] | [WRRW23, Thm 3]; [RRUV16, Thm 6.2] |
//! | run several mechanisms concurrently | [`session::PrivacySession`] | [HSTVVXZ23] |
//! | add exact integer noise | [`sampling::DiscreteGaussian`] | [CKS20, Algs. 1–3, Thm 14] |
//! | check a mechanism empirically | [`audit`] | [NHSBTJCT23]; [DRS19] |
//!
//! ## Privacy measures as types
//!
//! A value of [`Zcdp`], [`GaussianDp`], … is always a meaningful guarantee: constructors
//! validate their parameters and name the one that is wrong. Composition is a method, in the
//! measure's own units, rounded up.
//!
//! ```
//! use dpgd_accounting::{GaussianDp, PureDp, Zcdp};
//!
//! let step = Zcdp::new(0.01).unwrap();
//! let hundred_steps = step.repeated(100).unwrap(); // 1.0-zCDP
//! assert!(hundred_steps.rho() >= 1.0);
//! // Gaussian DP composes in quadrature: √(3² + 4²) = 5.
//! assert_eq!(GaussianDp::new(3.0).unwrap().compose(GaussianDp::new(4.0).unwrap()).mu(), 5.0);
//! // Pure ε-DP is (ε²/2)-zCDP.
//! assert_eq!(PureDp::new(2.0).unwrap().to_zcdp().rho(), 2.0);
//! let e = Zcdp::new(-1.0).unwrap_err();
//! assert!(e.to_string().contains("rho")); // errors name the parameter
//! ```
//!
//! ## Conversions to (ε, δ)
//!
//! [`ToApproxDp::epsilon`] converts with a named [`Conversion`]: `bun-steinke`
//! (ε = ρ + 2√(ρ ln 1/δ)), `cks` (the tighter RDP conversion, optimised exactly over the
//! order) and `gaussian-exact` (the exact (ε, δ) curve of Gaussian DP, accepted only by
//! [`GaussianDp`], because it is wrong for other zCDP mechanisms). [`Conversion::max_rho`]
//! inverts them. See [`convert`] for the formulas and why `gaussian-exact` is valid for
//! private GD with filtering.
//!
//! ```
//! use dpgd_accounting::{Conversion, GaussianDp, ToApproxDp, Zcdp};
//!
//! let z = Zcdp::new(0.05).unwrap();
//! let loose = z.epsilon(1e-5, Conversion::BunSteinke).unwrap();
//! let tight = z.epsilon(1e-5, Conversion::Cks).unwrap();
//! assert!(tight < loose);
//! assert!(z.epsilon(1e-5, Conversion::GaussianExact).is_err()); // not for arbitrary zCDP
//! let g = GaussianDp::from_gaussian_zcdp(z); // this zCDP comes from Gaussian noise
//! assert!(g.epsilon(1e-5, Conversion::GaussianExact).unwrap() < tight);
//! // The inverse: the largest ρ whose ε at δ = 1e-5 is at most 1.
//! let rho = Conversion::Cks.max_rho(1.0, 1e-5).unwrap();
//! assert!(rho.epsilon(1e-5, Conversion::Cks).unwrap() <= 1.0);
//! ```
//!
//! ## Calibrating private gradient descent
//!
//! Private GD with individual filtering ([FZ21, Alg. 3]) with noise multiplier σ and
//! k worst-case steps is √k/σ-Gaussian DP under the zero-out relation, however many steps
//! it runs. A [`GdPlan`] is the unit of calibration: training plus every other Gaussian
//! release the run makes (noisy counts, noisy accuracies), under a [`Neighbours`] relation.
//! [`GdPlan::calibrate`] returns the smallest σ whose guarantee, converted exactly as users
//! convert it, meets the target.
//!
//! ```
//! use dpgd_accounting::{ApproxDp, Conversion, GaussianRelease, GdPlan, Neighbours, PrivateGd, ToApproxDp};
//!
//! let target = ApproxDp::new(1.0, 1e-5).unwrap();
//! let plan = GdPlan::new(300.0)
//!     .unwrap()
//!     .with_neighbours(Neighbours::ReplaceOne) // sensitivity 2C
//!     .with_release(GaussianRelease::new(200.0, 1.0, 20).unwrap()); // 20 noisy counts, std 200
//! let sigma = plan.calibrate(target, Conversion::GaussianExact).unwrap();
//! assert!(plan.guarantee(sigma).unwrap().epsilon(1e-5, Conversion::GaussianExact).unwrap() <= 1.0);
//! // The training run alone, as its own record:
//! let run = PrivateGd::new(sigma, 1.0, 300.0).unwrap().with_neighbours(Neighbours::ReplaceOne).unwrap();
//! assert!(run.epsilon(1e-5, Conversion::GaussianExact).unwrap() < 1.0);
//! ```
//!
//! ## Filters, odometers and sessions
//!
//! A filter ([`filter::PrivacyFilter`]) is asked before each mechanism runs and refuses
//! (changing nothing) a mechanism that could take the composition past its budget, even when
//! the mechanisms' parameters are chosen adaptively. An odometer ([`odometer`]) has no budget:
//! it bounds the loss so far, at all times at once; its mechanisms must be pure or
//! probabilistic DP. A [`session::PrivacySession`] lets several interactive mechanisms, from
//! any threads, charge one filter or odometer, and releases an answer only after its charge
//! was accepted.
//!
//! ```
//! use dpgd_accounting::filter::{rounds_allowed, DpFilter, PrivacyFilter, WhitehouseFilter, ZcdpFilter};
//! use dpgd_accounting::odometer::{MixtureOdometer, Odometer};
//! use dpgd_accounting::session::PrivacySession;
//! use dpgd_accounting::{ApproxDp, ProbabilisticDp, Zcdp};
//!
//! // A zCDP budget shared by two mechanisms.
//! let session = PrivacySession::new(ZcdpFilter::new(Zcdp::new(0.5).unwrap()));
//! let (training, counts) = (session.mechanism("training"), session.mechanism("counts"));
//! assert_eq!(training.query(Zcdp::new(0.375).unwrap(), || "update").unwrap(), "update");
//! assert!(counts.query(Zcdp::new(0.25).unwrap(), || 42).is_err()); // refused: nothing released
//!
//! // How many ε₀ = 0.01 mechanisms fit (1, 1e-6)-DP under [WRRW23, Thm 2]? k with
//! // k·ε₀² ≤ (√(2 ln 1e6 + 2) − √(2 ln 1e6))² ≈ 0.03496: 349.
//! let rule = WhitehouseFilter::new(1.0, 1e-6, 0.0).unwrap();
//! assert_eq!(rounds_allowed(&rule, 0.01).unwrap(), Some(349));
//! let mut f = DpFilter::new(rule);
//! assert!(f.try_charge(ApproxDp::pure(0.5).unwrap()).is_err()); // alone over budget: refused
//! f.try_charge(ApproxDp::pure(0.1).unwrap()).unwrap(); // a cheaper one fits
//!
//! // An odometer takes mechanisms with δ > 0 only as probabilistic DP.
//! let mut odo = Odometer::new(MixtureOdometer::tight_at(1.0, 1e-6, 1e-6).unwrap());
//! assert!(odo.record(ApproxDp::new(0.1, 1e-9).unwrap()).is_err());
//! odo.record_pdp(ProbabilisticDp::new(0.1, 1e-9).unwrap());
//! assert!(odo.bound().unwrap() > 0.1);
//! ```
//!
//! ## The individual filter
//!
//! [`IndividualFilter`](filter::IndividualFilter) is the per-example ledger of individual
//! privacy filtering ([FZ21, Alg. 2, Thm 4.5]): each example spends its own budget and drops
//! out when it is spent, and the whole run keeps the guarantee of the worst case. In private
//! GD the ledger's unit is the squared clipped gradient norm, and [`grant`] is the clip
//! rule min(request, what remains).
//!
//! [`grant`]: filter::IndividualFilter::grant
//!
//! ```
//! use dpgd_accounting::filter::IndividualFilter;
//!
//! let mut ledger = IndividualFilter::new(3, 2.0).unwrap(); // B_norm = 2 for each of 3 examples
//! assert_eq!(ledger.grant(0, 1.5), 1.5);
//! assert_eq!(ledger.grant(0, 1.5), 0.5); // only 0.5 was left
//! assert!(!ledger.is_active(0) && ledger.is_active(1));
//! assert!(ledger.charge(1, 3.0).is_err()); // refused whole, nothing charged
//! ```
//!
//! ## Samplers
//!
//! [`sampling`] draws exact discrete Gaussian (and discrete Laplace) noise with integer
//! arithmetic only ([CKS20]), for integer-valued queries; its guarantee is zCDP, so only
//! the zCDP conversions apply.
//!
//! ```
//! use dpgd_accounting::sampling::DiscreteGaussian;
//! use rand::SeedableRng;
//!
//! let noise = DiscreteGaussian::new(25.0).unwrap();
//! let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
//! let noisy_count = 1_000 + noise.sample(&mut rng);
//! # let _ = noisy_count;
//! assert!(noise.zcdp(1.0).unwrap().rho() >= 1.0 / 1250.0);
//! ```
//!
//! ## Audit statistics
//!
//! [`audit`] turns the scores of runs with and without a canary into lower bounds on μ and ε
//! that hold with a stated confidence: exact Clopper–Pearson bounds on the test's error
//! rates, and the trade-off curves of Gaussian and (ε, δ)-DP.
//!
//! ```
//! use dpgd_accounting::audit::{clopper_pearson, gdp_mu_lower_bound};
//!
//! // 12 false positives in 1,000 runs without the canary, 30 false negatives in 1,000 with it.
//! let fpr = clopper_pearson(12, 1000, 0.95).unwrap().upper;
//! let fnr = clopper_pearson(30, 1000, 0.95).unwrap().upper;
//! let mu = gdp_mu_lower_bound(fpr, fnr).unwrap();
//! assert!(mu > 3.5 && mu < 4.5); // no mechanism below ~3.9-GDP admits this test
//! ```
//!
//! ## Rounding contract
//!
//! Floating-point rounding never makes a reported privacy loss smaller than the exact one at
//! the exact input doubles, and never makes a budget larger:
//!
//! * every composition, sum of costs, product and root on a privacy parameter rounds towards
//!   +∞ ([`numeric::add_up`], [`numeric::mul_up`], …), and remaining budgets towards −∞;
//!   a result that overflows is +∞ (a vacuous guarantee, reported as ε = ∞);
//! * every forward conversion, and every filter or odometer bound, adds an explicit bound on
//!   its own rounding error, [`numeric::ROUNDING_MARGIN`] = 2⁻⁴⁶ (128 ulps) of the magnitude
//!   of its terms (error analyses in [`convert`]); checked against 60-digit mpmath values at
//!   exact input doubles, the reported ε is never below the exact one and above it by at most
//!   1.2e-8 relative;
//! * every inverse (the largest ρ or μ for a target, a calibrated σ) is solved on the margined
//!   forward conversion and confirmed with it exactly as users call it, so it never
//!   overstates the budget;
//! * lower bounds (audits) round down, and confidence bounds are widened, never narrowed.
//!
//! ## Errors, not panics
//!
//! Every public function returns a value or an [`AccountingError`] that names the parameter
//! and what a valid one looks like, for any `f64` input (NaN, ±∞, subnormals, ±1e300, …);
//! every solver has an iteration cap, so nothing hangs (`tests/robustness.rs` checks this with
//! arbitrary bit patterns, each call under 200 ms). The only panics are documented index
//! panics of the per-example ledger's slice-like accessors, which have non-panicking twins.
//!
//! ## References
//!
//! * [BBGHS20] Balle, Barthe, Gaboardi, Hsu & Sato, *Hypothesis Testing Interpretations and
//!   Rényi Differential Privacy*, AISTATS 2020.
//! * [BS16] Bun & Steinke, *Concentrated Differential Privacy: Simplifications, Extensions,
//!   and Lower Bounds*, TCC 2016.
//! * [BW18] Balle & Wang, *Improving the Gaussian Mechanism for Differential Privacy:
//!   Analytical Calibration and Optimal Denoising*, ICML 2018.
//! * [CKS20] Canonne, Kamath & Steinke, *The Discrete Gaussian for Differential Privacy*,
//!   NeurIPS 2020.
//! * [CP34] Clopper & Pearson, *The Use of Confidence or Fiducial Limits Illustrated in the
//!   Case of the Binomial*, Biometrika 1934.
//! * [DGKKM22] Doroshenko, Ghazi, Kamath, Kumar & Manurangsi, *Connect the Dots: Tighter
//!   Discrete Approximations of Privacy Loss Distributions*, PETS 2022.
//! * [DRS19] Dong, Roth & Su, *Gaussian Differential Privacy*, JRSS-B 2022.
//! * [FZ21] Feldman & Zrnic, *Individual Privacy Accounting via a Rényi Filter*, NeurIPS 2021.
//! * [HRMS21] Howard, Ramdas, McAuliffe & Sekhon, *Time-uniform, Nonparametric,
//!   Nonasymptotic Confidence Sequences*, Annals of Statistics 2021.
//! * [HSTVVXZ23] Haney, Shoemate, Tian, Vadhan, Vyrros, Xu & Zhang, *Concurrent Composition for
//!   Interactive Differential Privacy with Adaptive Privacy-Loss Parameters*, CCS 2023.
//! * [KJPH21] Koskela, Jälkö, Prediger & Honkela, *Tight Differential Privacy for
//!   Discrete-Valued Mechanisms and for the Subsampled Gaussian Mechanism Using FFT*, AISTATS 2021.
//! * [KS14] Kasiviswanathan & Smith, *On the 'Semantics' of Differential Privacy: A Bayesian
//!   Formulation*, J. Privacy and Confidentiality 2014.
//! * [KTH23] Koskela, Tobaben & Honkela, *Individual Privacy Accounting with Gaussian
//!   Differential Privacy*, ICLR 2023.
//! * [Mir12] Mironov, *On Significance of the Least Significant Bits for Differential
//!   Privacy*, CCS 2012.
//! * [Mir17] Mironov, *Rényi Differential Privacy*, CSF 2017.
//! * [MTZ19] Mironov, Talwar & Zhang, *Rényi Differential Privacy of the Sampled Gaussian
//!   Mechanism*, 2019.
//! * [NHSBTJCT23] Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini & Terzis, *Tight
//!   Auditing of Differentially Private Machine Learning*, USENIX Security 2023.
//! * [RRUV16] Rogers, Roth, Ullman & Vadhan, *Privacy Odometers and Filters: Pay-as-you-Go
//!   Composition*, NeurIPS 2016.
//! * [ST22] Smith & Thakurta, *Fully Adaptive Composition for Gaussian Differential Privacy*,
//!   2022.
//! * [WRRW23] Whitehouse, Ramdas, Rogers & Wu, *Fully-Adaptive Composition in Differential
//!   Privacy*, ICML 2023.
//!
//! The binomial tails of [`audit`] use Loader's saddle-point form of the binomial pmf
//! (C. Loader, *Fast and Accurate Computation of Binomial Probabilities*, 2000).
//!
//! [FZ21]: https://arxiv.org/abs/2008.11193
//! [WRRW23]: https://arxiv.org/abs/2203.05481
//! [RRUV16]: https://arxiv.org/abs/1605.08294
//! [HSTVVXZ23]: https://arxiv.org/abs/2309.05901
//! [BS16]: https://arxiv.org/abs/1605.02065
//! [Mir17]: https://arxiv.org/abs/1702.07476
//! [MTZ19]: https://arxiv.org/abs/1908.10530
//! [KJPH21]: https://arxiv.org/abs/2006.07134
//! [DGKKM22]: https://arxiv.org/abs/2207.04380
//! [BW18]: https://arxiv.org/abs/1805.06530
//! [CKS20]: https://arxiv.org/abs/2004.00010
//! [BBGHS20]: https://arxiv.org/abs/1905.09982
//! [DRS19]: https://arxiv.org/abs/1905.02383
//! [ST22]: https://arxiv.org/abs/2210.17520
//! [KTH23]: https://arxiv.org/abs/2209.15596
//! [NHSBTJCT23]: https://arxiv.org/abs/2302.07956
//! [Mir12]: https://doi.org/10.1145/2382196.2382264
//! [HRMS21]: https://arxiv.org/abs/1810.08240
//! [KS14]: https://arxiv.org/abs/0803.3946
//! [CP34]: https://doi.org/10.1093/biomet/26.4.404

#![deny(missing_docs)]
#![warn(clippy::missing_errors_doc)]

pub mod audit;
mod calibrate;
pub mod convert;
pub mod decimal;
mod error;
pub mod event;
pub mod filter;
pub mod individual_sgd;
mod measure;
pub mod mechanism;
mod neighbours;
pub mod numeric;
pub mod odometer;
pub mod pld;
pub mod sampling;
pub mod selection;
pub mod session;
pub mod subsampled;

pub use calibrate::{GaussianRelease, GdPlan, PrivateGd, calibrate_sigma};
pub use convert::{Conversion, ToApproxDp};
pub use error::{AccountingError, Result, non_negative, positive, probability};
pub use measure::{ApproxDp, GaussianDp, ProbabilisticDp, PureDp, Rdp, Zcdp};
pub use neighbours::Neighbours;
