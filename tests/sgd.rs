//! DP-SGD (`privacy.method = "sgd"`): the step is what its accounting analyses (Poisson
//! sampling from the run's CSPRNG, clip C, noise once, divided by the expected batch size
//! q·n), the run reports the Rényi-DP ε Opacus would print, resumes bit for bit, and the
//! configuration refuses what the accounting does not cover.

mod common;

use common::{fixture_config, result, snapshot, train, try_train};
use dpgd::accounting::filter::IndividualFilter;
use dpgd::noise::{NoiseSeed, Stream};
use dpgd::per_example::Network;
use dpgd::train::TrainConfig;
use dpgd::train::sgd::{SgdAccounting, expected_batch, poisson_sample};
use dpgd::train::step::{Aggregation, GradientPlan, UpdateRule, apply_update};
use rand::SeedableRng;

const N: usize = 600;

fn config(method: &str, privacy: &str, train: &str) -> String {
    let privacy = format!("method = \"{method}\"\n{privacy}\ndelta = 1e-5\nclip = 1.0");
    let train = format!("lr = 0.5\nchunk = 8\neval_every = 0\n{train}");
    fixture_config(&format!("sgd-{method}"), "opacus-cnn", (N, 200), &privacy, &train)
}

fn sgd(privacy: &str, train: &str) -> String {
    config("sgd", &format!("sample_rate = 0.1\nworst_case_steps = 6\n{privacy}"), train)
}

#[test]
fn sgd_at_rate_one_is_plain_gd_step_for_step() {
    // Every example sampled, divisor 1·n: the clip (the plain run's budget cannot bind within
    // k steps), the noise streams and the update are plain GD's.
    let (plain_dir, sgd_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let plain = config("plain", "sigma = 2.0\nworst_case_steps = 4", "seed = 9");
    let all = config("sgd", "sigma = 2.0\nworst_case_steps = 4\nsample_rate = 1.0", "seed = 9");
    train(&plain, plain_dir.path(), None);
    train(&all, sgd_dir.path(), None);
    assert_eq!(snapshot(&plain, plain_dir.path()).theta, snapshot(&all, sgd_dir.path()).theta);
}

#[test]
fn a_step_sums_the_poisson_sample_and_divides_by_the_expected_batch_size() {
    let text = sgd("sigma = 1.5", "seed = 4");
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(train(&text, dir.path(), Some(1)).steps, 1);
    // The same step by hand from the library's parts, on the engine the run used.
    let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
    let spec = cfg.model().unwrap();
    let expected = match cfg.engine_for(spec) {
        dpgd::train::Engine::Burn => {
            let device = cfg.config().train.device.device().unwrap();
            let model = dpgd::model::ConfigModel::new(spec, &device, cfg.config().model.init_seed).unwrap();
            let theta = model.engine.current_params().unwrap();
            one_step_by_hand(&cfg, model, theta)
        }
        _ => {
            let net = Network::new(spec).unwrap();
            let theta = net.init_params(&mut rand_chacha::ChaCha8Rng::seed_from_u64(cfg.config().model.init_seed));
            one_step_by_hand(&cfg, net, theta)
        }
    };
    assert_eq!(snapshot(&text, dir.path()).theta, expected);
}

/// The first step of the SGD run of `cfg` (seed 4, σ = 1.5) from θ₀ = `theta` on `engine`.
fn one_step_by_hand<E: dpgd::per_example::PerExample>(
    cfg: &dpgd::train::ValidConfig,
    net: E,
    mut theta: Vec<f32>,
) -> Vec<f32> {
    let data = cfg.config().data.load().unwrap();
    let examples = data.train.head(N);
    let sample = poisson_sample(N, 0.1, &mut NoiseSeed::Fixed(4).rng(Stream::sample(1)).unwrap());
    let drawn = sample.iter().filter(|&&b| b).count();
    assert_ne!(drawn, 60, "the realised batch differs from q·n here, so the divisor is tested");
    let aggregation = Aggregation::for_run(cfg, &net, N).unwrap();
    let plan = GradientPlan::new(net, examples, data.default_normalize(), aggregation, 8);
    let mut ledger = IndividualFilter::new(N, f64::MAX).unwrap();
    let (sum, stats) =
        plan.gradient_sum_of(&theta, &mut ledger, 1, dpgd::train::step::Selection::Sample(&sample)).unwrap();
    assert_eq!(stats.computed, drawn);
    assert!((0..N).all(|i| (ledger.spent(i) > 0.0) == sample[i]), "exactly the sampled examples were computed");
    let mut rng = NoiseSeed::Fixed(4).rng(Stream::update(1)).unwrap();
    let noise = (cfg.config().privacy.noise, 1.5);
    apply_update(&mut theta, &mut Vec::new(), sum, noise, UpdateRule::plain(0.5, expected_batch(0.1, N)), &mut rng)
        .unwrap();
    theta
}

#[test]
fn a_resumed_run_ends_bit_for_bit_where_an_uninterrupted_one_does() {
    let text = sgd("sigma = 1.5", "seed = 4");
    let (whole, parts) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = train(&text, whole.path(), None);
    assert_eq!(train(&text, parts.path(), Some(2)).steps, 2);
    let b = train(&text, parts.path(), None);
    assert_eq!(snapshot(&text, whole.path()).theta, snapshot(&text, parts.path()).theta);
    assert_eq!(result(&a).test_accuracy, result(&b).test_accuracy);
}

#[test]
fn an_os_seeded_run_is_private_with_the_rdp_epsilon_of_its_steps() {
    let text = sgd("epsilon = 2.0", "");
    let dir = tempfile::tempdir().unwrap();
    let s = train(&text, dir.path(), None);
    let p = s.privacy.as_ref().unwrap();
    assert!(p.private, "{:?}", p.not_private_because);
    let a = p.accounting.as_ref().unwrap();
    let sampling = a.sampling.as_ref().unwrap();
    assert_eq!((sampling.rate, sampling.steps, sampling.expected_batch_size), (0.1, 6, 60.0));
    let sigma = a.training.sigma;
    let want =
        SgdAccounting::new(0.1, sigma, 6, dpgd::accounting::Conversion::Cks).unwrap().epsilon_through(6, 1e-5).unwrap();
    assert_eq!((p.epsilon, sampling.rdp_order), (Some(want.0), want.1));
    assert!(want.0 <= 2.0 && want.0 > 1.99, "calibrated to the target: {}", want.0);
    assert!(p.summary.contains("add-or-remove-one"), "{}", p.summary);
    assert_eq!(p.ledger.budget_per_example, None);
    assert!(a.rho.is_none() && a.session.is_none() && a.releases.is_empty());
    assert!(!dpgd::train::RunFolder::new(dir.path()).budget().exists(), "no per-example budgets to report");
    // A fixed seed is not private, and the file says so.
    let seeded = tempfile::tempdir().unwrap();
    let p = train(&sgd("epsilon = 2.0", "seed = 1"), seeded.path(), None).privacy.unwrap();
    assert!(!p.private && p.not_private_because.iter().any(|w| w.contains("train.seed")));
}

#[test]
fn what_the_accounting_does_not_cover_is_refused_by_field() {
    let refused = |text: &str, field: &str| {
        let err = TrainConfig::from_toml(text, &[]).and_then(|c| c.validate()).unwrap_err().to_string();
        assert!(err.contains(field), "expected {field}: {err}");
    };
    refused(&config("sgd", "sigma = 1.0\nworst_case_steps = 3", ""), "privacy.sample_rate");
    refused(&sgd("sigma = 1.0\nsample_rate = 0.0", "").replace("sample_rate = 0.1\n", ""), "privacy.sample_rate");
    refused(&sgd("sigma = 1.0\nneighbours = \"replace-one\"", ""), "privacy.neighbours");
    refused(&sgd("sigma = 1.0\nnoise = \"discrete-gaussian\"\nconversion = \"cks\"", ""), "privacy.noise");
    refused(&sgd("sigma = 1.0\nconversion = \"gaussian-exact\"", ""), "privacy.conversion");
    refused(&sgd("sigma = 1.0", "max_steps = 9"), "train.max_steps");
    refused(&config("plain", "sigma = 1.0\nworst_case_steps = 3\nsample_rate = 0.1", ""), "privacy.sample_rate");
    refused(&config("non-private", "worst_case_steps = 3\nsample_rate = 0.1", ""), "privacy.sample_rate");
    refused(&(sgd("sigma = 1.0", "") + "[release]\nactive_count = \"exact-non-private\"\n"), "release.active_count");
    let counts = sgd("sigma = 1.0", "") + "[release]\nactive_count = \"noisy\"\n";
    refused(&counts, "release.active_count");
    // Unwritten, the conversion of an SGD run is cks (written out in its recorded config).
    let c = TrainConfig::from_toml(&sgd("sigma = 1.0", ""), &[]).unwrap();
    assert_eq!(c.privacy.conversion, dpgd::accounting::Conversion::Cks);
    assert!(try_train(&sgd("sigma = 1.0", ""), tempfile::tempdir().unwrap().path(), Some(1)).is_ok());
}

/// DP-SGD with individual accounting without sampling (q = 1) is private GD with individual
/// filtering: the step's Rényi charge is α·r²/(2σ²), so the Rényi budget of k full steps stops
/// each example exactly where B_norm = k·C² does. Same models (to rounding), same ledgers in
/// their own units, the same examples dropped.
#[test]
fn sgd_filtered_at_rate_one_is_filtered_gd() {
    let (gd_dir, sgd_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // Clip 30: some gradients stay below it, so some examples outlast k steps.
    let clip4 = |t: String| t.replace("clip = 1.0", "clip = 30.0");
    let gd = clip4(config("filtered", "sigma = 2.0\nworst_case_steps = 3", "seed = 9\nmax_steps = 8"))
        + "[stopping]\nrule = \"max-steps\"\n";
    let sgd = clip4(config(
        "sgd-filtered",
        "sigma = 2.0\nworst_case_steps = 3\nsample_rate = 1.0",
        "seed = 9\nmax_steps = 8",
    ));
    train(&gd, gd_dir.path(), None);
    let s = train(&sgd, sgd_dir.path(), None);
    let (a, b) = (snapshot(&gd, gd_dir.path()), snapshot(&sgd, sgd_dir.path()));
    let scale = a.theta.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let worst = a.theta.iter().zip(&b.theta).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    assert!(worst <= 1e-4 * scale, "the models differ by {worst} (scale {scale})");
    let order = s.privacy.as_ref().unwrap().accounting.as_ref().unwrap().sampling.as_ref().unwrap();
    let alpha = f64::from(order.individual.as_ref().unwrap().order);
    let per_unit = alpha / (2.0 * 2.0 * 2.0 * 900.0); // α/(2σ²C²) per unit of squared norm
    let b_norm = 3.0 * 900.0;
    let (mut dropped, mut kept) = (0, 0);
    for (i, (&g, &r)) in a.spent.iter().zip(&b.spent).enumerate() {
        assert!((r - g * per_unit).abs() <= 1e-9 * (b_norm * per_unit), "example {i}: {r} vs {g}·α/(2σ²C²)");
        let (gd_out, sgd_out) = (g >= b_norm * (1.0 - 1e-12), r >= b.meta.budget * (1.0 - 1e-12));
        assert_eq!(gd_out, sgd_out, "example {i} dropped by one method only");
        if gd_out { dropped += 1 } else { kept += 1 }
    }
    assert!(dropped > 0 && kept > 0, "{dropped} dropped, {kept} kept: the filter was not tested");
}

/// An OS-seeded run with individual accounting is private with the filter's ε (plain DP-SGD's
/// at the filter's order), never lets an example exceed its Rényi budget, charges every
/// example every step (a full pass) and trains some of them past step T.
#[test]
fn sgd_filtered_is_private_charges_every_example_and_keeps_small_gradients_training() {
    // A clip far above the gradients (and a small step): some examples outlast T steps.
    let text = config("sgd-filtered", "epsilon = 2.0\nsample_rate = 0.1\nworst_case_steps = 6", "max_steps = 12")
        .replace("clip = 1.0", "clip = 100.0")
        .replace("lr = 0.5", "lr = 0.05");
    let dir = tempfile::tempdir().unwrap();
    let s = train(&text, dir.path(), None);
    let p = s.privacy.as_ref().unwrap();
    assert!(p.private, "{:?}", p.not_private_because);
    let a = p.accounting.as_ref().unwrap();
    let ind = a.sampling.as_ref().unwrap().individual.as_ref().unwrap();
    let want = dpgd::accounting::individual_sgd::IndividualSgd::for_steps(
        0.1,
        a.training.sigma,
        6,
        1e-5,
        dpgd::accounting::Conversion::Cks,
    )
    .unwrap();
    assert_eq!((ind.order, ind.budget), (want.order(), want.budget()));
    assert_eq!(p.epsilon, Some(want.epsilon(1e-5).unwrap()));
    assert!(want.epsilon(1e-5).unwrap() <= 2.0 + 1e-9, "{}", want.epsilon(1e-5).unwrap());
    assert_eq!(p.ledger.budget_per_example, Some(want.budget()));
    assert!(want.epsilon(1e-5).unwrap() <= 2.0, "at most the typed target");
    let snap = snapshot(&text, dir.path());
    assert_eq!(snap.meta.budget, want.budget());
    assert!(snap.spent.iter().all(|&x| x <= want.budget()), "an example exceeded its budget");
    // The rest on a fixed seed, so that which examples outlast T does not vary between runs.
    let text = text + "seed = 5\n";
    let dir = tempfile::tempdir().unwrap();
    train(&text, dir.path(), None);
    let snap = snapshot(&text, dir.path());
    assert!(snap.spent.iter().all(|&x| x <= want.budget()), "an example exceeded its budget");
    let full_steps = 6.0 * want.charge(1.0);
    assert!(snap.spent.iter().all(|&x| x > 0.0), "every example is charged, sampled or not");
    let still = snap.spent.iter().filter(|&&x| x < want.budget()).count();
    assert!(still > 0, "no example trained past step T: the individual accounting was not tested");
    assert!(still < N, "no example was dropped");
    assert!(full_steps >= want.budget() * (1.0 - 1e-9));
    // Every active example is computed every step: the first step computes all N.
    let steps = std::fs::read_to_string(dpgd::train::RunFolder::new(dir.path()).steps()).unwrap();
    let first: serde_json::Value = serde_json::from_str(steps.lines().next().unwrap()).unwrap();
    assert_eq!(first["active_exact"].as_u64(), Some(N as u64));
    assert!(dpgd::train::RunFolder::new(dir.path()).budget().exists(), "the confidential budget report");
    // Every step computed every example still active: at least those active at the end.
    for line in steps.lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(row["active_exact"].as_u64().unwrap() as usize >= still, "{row}");
    }
    // Every conversion converts the one (α, B) guarantee the ledger enforces.
    let by = &a.epsilon_by_conversion;
    assert_eq!(by["cks"], Some(want.epsilon(1e-5).unwrap()));
    let classic = want.epsilon_by(1e-5, dpgd::accounting::Conversion::BunSteinke).unwrap();
    assert_eq!(by["bun-steinke"], Some(classic));
    assert_eq!(by["gaussian-exact"], None);
    // A resumed run ends where an uninterrupted one does (fixed seed).
    let seeded =
        config("sgd-filtered", "sigma = 1.5\nsample_rate = 0.1\nworst_case_steps = 4", "max_steps = 7\nseed = 3");
    let (whole, parts) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    train(&seeded, whole.path(), None);
    train(&seeded, parts.path(), Some(3));
    train(&seeded, parts.path(), None);
    let (x, y) = (snapshot(&seeded, whole.path()), snapshot(&seeded, parts.path()));
    assert_eq!((x.theta, x.spent), (y.theta, y.spent));
    // Fewer steps than T is refused, as for filtered GD.
    let short = config("sgd-filtered", "sigma = 1.5\nsample_rate = 0.1\nworst_case_steps = 4", "max_steps = 3");
    let err = TrainConfig::from_toml(&short, &[]).and_then(|c| c.validate()).unwrap_err().to_string();
    assert!(err.contains("train.max_steps"), "{err}");
}

/// A step with individual accounting sums exactly the sampled examples (the unsampled ones are
/// charged and add nothing) — the same sum, to rounding, as plain DP-SGD's step on the same
/// sample — and charges every example, sampled or not, its step's Rényi DP.
#[test]
fn a_charged_sample_sums_the_sample_and_charges_everyone() {
    use dpgd::accounting::individual_sgd::IndividualSgd;
    use dpgd::train::step::Selection;
    let text = sgd("sigma = 1.5", "seed = 4").replace("clip = 1.0", "clip = 30.0");
    let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
    let data = cfg.config().data.load().unwrap();
    let net = Network::new(cfg.model().unwrap()).unwrap();
    let theta = net.init_params(&mut rand_chacha::ChaCha8Rng::seed_from_u64(cfg.config().model.init_seed));
    let sample = poisson_sample(N, 0.1, &mut NoiseSeed::Fixed(4).rng(Stream::sample(1)).unwrap());
    let aggregation = Aggregation::for_run(&cfg, &net, N).unwrap();
    let plan = GradientPlan::new(net, data.train.head(N), data.default_normalize(), aggregation, 8);
    let acc = IndividualSgd::for_steps(0.1, 1.5, 6, 1e-5, dpgd::accounting::Conversion::Cks).unwrap();
    let mut plain_ledger = IndividualFilter::new(N, f64::MAX).unwrap();
    let (plain, _) = plan.gradient_sum_of(&theta, &mut plain_ledger, 1, Selection::Sample(&sample)).unwrap();
    let mut ledger = IndividualFilter::new(N, acc.budget()).unwrap();
    let (charged, stats) =
        plan.gradient_sum_of(&theta, &mut ledger, 1, Selection::ChargedSample(&sample, &acc)).unwrap();
    assert_eq!(stats.computed, N, "every example computed");
    let (a, b) = (plain.to_f32(), charged.to_f32());
    let scale = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0);
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-5 * scale, "{x} vs {y}");
    }
    for (i, &sampled) in sample.iter().enumerate() {
        let spent = ledger.spent(i);
        assert!(spent > 0.0 && spent <= acc.charge(1.0), "example {i} (sampled: {sampled}): {spent}");
    }
}

/// `privacy.json` carries the run's composition as an event that another accountant checks:
/// for private GD the Gaussian-DP accountant gives the report's μ, for DP-SGD the RDP
/// accountant gives its ε; DP-SGD with individual accounting, a filter at one order, has none.
#[test]
fn privacy_json_carries_the_runs_event_for_other_accountants() {
    use dpgd::accounting::event::{Accountant, GdpAccountant, RdpAccountant};
    use dpgd::accounting::subsampled::dp_accounting_orders;
    let dir = tempfile::tempdir().unwrap();
    let gd = train(&config("plain", "sigma = 3.0\nworst_case_steps = 4", "seed = 1"), dir.path(), None);
    let a = gd.privacy.unwrap().accounting.unwrap();
    let mut gdp = GdpAccountant::new(dpgd::accounting::Conversion::GaussianExact);
    gdp.compose(a.event.as_ref().expect("a GD run's event")).unwrap();
    let mu = a.mu.unwrap();
    assert!((gdp.mu() - mu).abs() <= 1e-12 * mu, "{} vs {mu}", gdp.mu());
    let dir = tempfile::tempdir().unwrap();
    let s = train(&sgd("sigma = 1.5", "seed = 1"), dir.path(), None).privacy.unwrap();
    let mut rdp = RdpAccountant::new(dp_accounting_orders(), dpgd::accounting::Conversion::Cks).unwrap();
    rdp.compose(s.accounting.as_ref().unwrap().event.as_ref().expect("an SGD run's event")).unwrap();
    assert_eq!(Some(rdp.epsilon(1e-5).unwrap()), s.accounting.unwrap().epsilon);
    let dir = tempfile::tempdir().unwrap();
    let filtered = config("sgd-filtered", "sigma = 1.5\nsample_rate = 0.1\nworst_case_steps = 3", "seed = 1");
    let f = train(&filtered, dir.path(), None).privacy.unwrap();
    assert!(f.accounting.unwrap().event.is_none());
}
