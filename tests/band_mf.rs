//! BandMF (`privacy.method = "bandmf"`): with one band it is DP-SGD bit for bit; with b bands an
//! example takes part only in its partition's steps, the noise is C⁻¹z over the steps, the run is
//! accounted as ⌈T/b⌉ rounds of DP-SGD (recomputed here from the published numbers), and the
//! configuration refuses what that does not cover.

mod common;

use common::{fixture_config, snapshot, train};
use dpgd::accounting::Conversion;
use dpgd::accounting::event::{Accountant, DpEvent, RdpAccountant};
use dpgd::accounting::subsampled::dp_accounting_orders;
use dpgd::train::{RunFolder, TrainConfig, read_json};

fn config(method: &str, privacy: &str) -> String {
    let privacy = format!("method = \"{method}\"\n{privacy}\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 9");
    fixture_config(&format!("band-{method}"), "logistic", (300, 100), &privacy, "lr = 0.5\nseed = 9\neval_every = 0")
}

#[test]
fn one_band_is_dp_sgd_bit_for_bit() {
    let (sgd_dir, band_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sgd = config("sgd", "sample_rate = 0.2\nepsilon = 4.0");
    let band = config("bandmf", "sample_rate = 0.2\nbands = 1\nepsilon = 4.0");
    train(&sgd, sgd_dir.path(), None);
    train(&band, band_dir.path(), None);
    assert_eq!(snapshot(&sgd, sgd_dir.path()).theta, snapshot(&band, band_dir.path()).theta);
    let eps = |dir: &std::path::Path| {
        let p: serde_json::Value = read_json(&RunFolder::new(dir).privacy()).unwrap();
        p["accounting"]["epsilon"].as_f64().unwrap()
    };
    assert_eq!(eps(sgd_dir.path()), eps(band_dir.path()));
}

/// The last b − 1 noise vectors are saved with the state every step: a private run (the
/// operating system's noise, which cannot be drawn again) stopped after 5 steps holds them, and
/// its resume continues the band (it places them, of the right length) to the end.
#[test]
fn a_private_run_saves_its_last_bands_noise_and_resumes_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let text = config("bandmf", "sample_rate = 0.2\nbands = 3\nepsilon = 4.0").replace("seed = 9\n", "");
    assert!(!text.contains("seed = 9"));
    train(&text, dir.path(), Some(5));
    let at_5 = snapshot(&text, dir.path());
    assert_eq!((at_5.meta.step, at_5.noise.len()), (5, 2 * at_5.theta.len()));
    train(&text, dir.path(), None);
    let end = snapshot(&text, dir.path());
    assert_eq!((end.meta.step, end.noise.len()), (9, 2 * end.theta.len()));
}

/// ⌈9/4⌉ = 3 rounds at the partition's rate, by hand from `privacy.json`'s σ and rate; the noise
/// std and the batch each step divides by are the partition's.
#[test]
fn b_bands_are_accounted_as_t_over_b_rounds_of_dp_sgd() {
    let dir = tempfile::tempdir().unwrap();
    let text = config("bandmf", "sample_rate = 0.5\nbands = 4\nepsilon = 2.0");
    train(&text, dir.path(), None);
    let p: serde_json::Value = read_json(&RunFolder::new(dir.path()).privacy()).unwrap();
    let a = &p["accounting"];
    let sigma = a["training"]["sigma"].as_f64().unwrap();
    assert_eq!(a["correlated"]["bands"], 4);
    assert_eq!(a["correlated"]["rounds"], 3);
    let mut acc = RdpAccountant::new(dp_accounting_orders(), Conversion::Cks).unwrap();
    acc.compose(&DpEvent::poisson_sampled(0.5, DpEvent::gaussian(sigma)).repeated(3)).unwrap();
    let by_hand = acc.epsilon(1e-5).unwrap();
    let stated = a["epsilon"].as_f64().unwrap();
    assert!(stated >= by_hand * (1.0 - 1e-12) && stated <= 2.0, "{stated} against {by_hand}");
    assert!((stated - 2.0).abs() < 0.05, "sigma is calibrated for 3 rounds, not 9 steps: {stated}");
    // More bands, fewer rounds at the same rate: less noise for the same epsilon.
    let one = TrainConfig::from_toml(&config("bandmf", "sample_rate = 0.5\nbands = 1\nepsilon = 2.0"), &[])
        .unwrap()
        .validate()
        .unwrap();
    assert!(sigma < one.sigma().unwrap(), "{sigma} against {}", one.sigma().unwrap());
}

#[test]
fn what_bandmf_does_not_account_for_is_refused() {
    let refused = |privacy: &str, field: &str, why: &str| {
        let e = TrainConfig::from_toml(&config("bandmf", privacy), &[]).and_then(|c| c.validate()).unwrap_err();
        let e = e.to_string();
        assert!(e.contains(field) && e.contains(why), "{privacy}: {e}");
    };
    refused("sample_rate = 0.5\nepsilon = 2.0", "privacy.bands", "needs the bands");
    refused("bands = 2\nepsilon = 2.0", "privacy.sample_rate", "within a step's partition");
    refused("sample_rate = 0.5\nbands = 0\nepsilon = 2.0", "privacy.bands", "give 1 to 9 bands");
    refused("sample_rate = 0.5\nbands = 10\nepsilon = 2.0", "privacy.bands", "give 1 to 9 bands");
    refused("sample_rate = 0.5\nbands = 2\nepsilon = 2.0\nnoise = \"discrete-gaussian\"", "privacy.noise", "bandmf");
    refused("sample_rate = 0.5\nbands = 2\nepsilon = 2.0\nconversion = \"gaussian-exact\"", "privacy.conversion", "");
    let e = TrainConfig::from_toml(&config("sgd", "sample_rate = 0.5\nbands = 2\nepsilon = 2.0"), &[])
        .and_then(|c| c.validate())
        .unwrap_err()
        .to_string();
    assert!(e.contains("privacy.bands") && e.contains("only method = \"bandmf\""), "{e}");
    let e =
        TrainConfig::from_toml(&config("sgd", "sample_rate = 0.5\nfactorization = \"optimized\"\nepsilon = 2.0"), &[])
            .and_then(|c| c.validate())
            .unwrap_err()
            .to_string();
    assert!(e.contains("privacy.factorization") && e.contains("only method = \"bandmf\""), "{e}");
    let e =
        TrainConfig::from_toml(&config("sgd", "sample_rate = 0.5\nfactorization = \"identity\"\nepsilon = 2.0"), &[])
            .and_then(|c| c.validate())
            .unwrap_err()
            .to_string();
    assert!(e.contains("privacy.factorization") && e.contains("\"identity\": only method"), "{e}");
}

/// `factorization = "optimized"`: the run's C is the optimiser's for its T, b and momentum,
/// published in `privacy.json`, at the same ε as the root's (the accounting does not depend on C);
/// `"identity"`: C = I, the same ε.
#[test]
fn every_factorization_is_published_and_accounted_as_the_root() {
    let (root, opt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let base = "sample_rate = 0.5\nbands = 3\nepsilon = 2.0";
    train(&config("bandmf", base), root.path(), None);
    train(&config("bandmf", &format!("{base}\nfactorization = \"optimized\"")), opt.path(), None);
    let read = |d: &std::path::Path| -> serde_json::Value { read_json(&RunFolder::new(d).privacy()).unwrap() };
    let (r, o) = (read(root.path()), read(opt.path()));
    assert_eq!(r["accounting"]["epsilon"], o["accounting"]["epsilon"]);
    let coefs = |p: &serde_json::Value| -> Vec<f64> {
        p["accounting"]["correlated"]["coefficients"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
    };
    assert_eq!(coefs(&o), dpgd::train::method::factorization::optimized(3, 0.0, 9));
    assert_ne!(coefs(&o), coefs(&r));
    assert!(coefs(&o).iter().map(|x| x * x).sum::<f64>() < 1.0);
    // `identity`: independent noise on the same partitions (C = I), the control; same ε.
    let id = tempfile::tempdir().unwrap();
    train(&config("bandmf", &format!("{base}\nfactorization = \"identity\"")), id.path(), None);
    let i = read(id.path());
    assert_eq!(r["accounting"]["epsilon"], i["accounting"]["epsilon"]);
    assert_eq!(coefs(&i), vec![1.0]);
    assert_eq!(i["accounting"]["correlated"]["bands"], 3);
}

fn filtered(method: &str, privacy: &str) -> String {
    let privacy = format!("method = \"{method}\"\n{privacy}\ndelta = 1e-5\nclip = 1.0\nepsilon = 2.0");
    let train = "lr = 0.5\nlr_after_k = 0.5\nmax_steps = 8\nseed = 9\neval_every = 0\n[stopping]\nrule = \"max-steps\"";
    fixture_config(&format!("band-{method}"), "logistic", (300, 100), &privacy, train)
}

/// With one band every example takes part in every step and the noise is z itself: filtered
/// GD, bit for bit (its model and every example's spent budget).
#[test]
fn one_band_with_the_filter_is_filtered_gd_bit_for_bit() {
    let (gd_dir, band_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let gd = filtered("filtered", "worst_case_steps = 4");
    let band = filtered("bandmf-filtered", "worst_case_steps = 4\nbands = 1");
    train(&gd, gd_dir.path(), None);
    train(&band, band_dir.path(), None);
    let (a, b) = (snapshot(&gd, gd_dir.path()), snapshot(&band, band_dir.path()));
    assert_eq!(a.theta, b.theta);
    assert_eq!(a.spent, b.spent);
}

/// With b bands an example is charged only at its partition's steps, within its budget of k
/// full participations; after the first step only partition 0 has spent anything.
#[test]
fn the_filter_charges_each_example_at_its_partitions_steps_only() {
    let text = filtered("bandmf-filtered", "worst_case_steps = 2\nbands = 3");
    let dir = tempfile::tempdir().unwrap();
    train(&text, dir.path(), Some(1));
    let spent = snapshot(&text, dir.path()).spent;
    for (i, s) in spent.iter().enumerate() {
        assert_eq!(*s > 0.0, i % 3 == 0, "example {i} spent {s} after step 1");
    }
    train(&text, dir.path(), None);
    let spent = snapshot(&text, dir.path()).spent;
    // 8 steps: partition 0 at steps 1, 4, 7; a budget of 2 full participations (clip 1).
    assert!(spent.iter().all(|&s| s <= 2.0 * (1.0 + 1e-12)), "{:?}", spent.iter().copied().fold(0.0, f64::max));
    assert!(spent.iter().any(|&s| s > 1.0), "some example took part more than once");
    let p: serde_json::Value = read_json(&RunFolder::new(dir.path()).privacy()).unwrap();
    assert_eq!(p["accounting"]["correlated"]["bands"], 3);
    assert!(p["accounting"]["guarantee"].as_str().unwrap().contains("individual filter"));
}
