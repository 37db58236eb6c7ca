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
use dpgd::train::step::{Aggregation, GradientPlan, apply_update};
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
    // The same step by hand from the library's parts.
    let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
    let data = cfg.config().data.load().unwrap();
    let examples = data.train.head(N);
    let net = Network::new(cfg.model().unwrap()).unwrap();
    let mut theta = net.init_params(&mut rand_chacha::ChaCha8Rng::seed_from_u64(0));
    let sample = poisson_sample(N, 0.1, &mut NoiseSeed::Fixed(4).rng(Stream::sample(1)).unwrap());
    let drawn = sample.iter().filter(|&&b| b).count();
    assert_ne!(drawn, 60, "the realised batch differs from q·n here, so the divisor is tested");
    let aggregation = Aggregation::for_run(&cfg, &net, N).unwrap();
    let plan = GradientPlan::new(net, examples, data.default_normalize(), aggregation, 8);
    let mut ledger = IndividualFilter::new(N, f64::MAX).unwrap();
    let (sum, stats) = plan.gradient_sum_of(&theta, &mut ledger, 1, Some(&sample)).unwrap();
    assert_eq!(stats.computed, drawn);
    assert!((0..N).all(|i| (ledger.spent(i) > 0.0) == sample[i]), "exactly the sampled examples were computed");
    let mut rng = NoiseSeed::Fixed(4).rng(Stream::update(1)).unwrap();
    let noise = (cfg.config().privacy.noise, 1.5);
    apply_update(&mut theta, sum, noise, 0.5, expected_batch(0.1, N), &mut rng).unwrap();
    assert_eq!(snapshot(&text, dir.path()).theta, theta);
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
