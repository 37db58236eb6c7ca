//! Data of other shapes: IDX images `(n, H, W)` of any size and
//! `(n, H, W, C)` with channels last; the model's input shape and class count come from the
//! data (the class count from the public test labels, never the training labels).

mod common;

use std::path::Path;

use common::try_train;
use dpgd::data::{Dataset, FILES, idx};

/// Writes a dataset of `n` training and `m` test images of `h × w` (× `c` channels last, if
/// `c > 1`), with `classes` classes whose images differ in brightness (learnable).
fn write(dir: &Path, (n, m): (u32, u32), [h, w, c]: [u32; 3], classes: u8) {
    let px = (h * w * c) as usize;
    let dims = |k: u32| if c > 1 { vec![k, h, w, c] } else { vec![k, h, w] };
    for (count, images, labels) in [(n, FILES[0], FILES[1]), (m, FILES[2], FILES[3])] {
        let ys: Vec<u8> = (0..count).map(|i| (i % u32::from(classes)) as u8).collect();
        let xs: Vec<u8> =
            ys.iter().enumerate().flat_map(|(i, &y)| (0..px).map(move |k| y * 60 + ((i + k) % 7) as u8 * 5)).collect();
        idx::write_gz(&dir.join(format!("{images}.gz")), &dims(count), &xs).unwrap();
        idx::write_gz(&dir.join(format!("{labels}.gz")), &[count], &ys).unwrap();
    }
}

fn config(data: &Path, model: &str, extra_data: &str) -> String {
    format!(
        "name = \"shapes\"\n[data]\ndir = \"{}\"\n{extra_data}\n[model]\n{model}\n[privacy]\nmethod = \"plain\"\n\
         epsilon = 8.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 10\n[train]\nlr = 2.0\nseed = 1\n",
        data.display()
    )
}

#[test]
fn images_of_another_size_train_with_presets_adapted_to_them() {
    let data = tempfile::tempdir().unwrap();
    write(data.path(), (300, 60), [16, 16, 1], 3);
    let d = Dataset::load(data.path(), None).unwrap();
    assert_eq!((d.shape(), d.classes()), ([1, 16, 16], 3), "shape and classes come from the data");
    for preset in ["logistic", "mlp", "opacus-cnn"] {
        let run = tempfile::tempdir().unwrap();
        let s = try_train(&config(data.path(), &format!("preset = \"{preset}\""), ""), run.path(), None)
            .unwrap_or_else(|e| panic!("{preset}: {e}"));
        let accuracy = s.result.unwrap().test_accuracy;
        assert!(accuracy > 0.6, "{preset}: test accuracy {accuracy} on three brightness classes");
        let spec: dpgd::arch::ModelSpec =
            dpgd::train::read_json(&dpgd::train::RunFolder::new(run.path()).model_spec()).unwrap();
        assert_eq!((spec.input, spec.classes), ([1, 16, 16], 3));
    }
}

#[test]
fn channels_last_images_are_read_channel_major_and_train() {
    let data = tempfile::tempdir().unwrap();
    write(data.path(), (200, 40), [8, 8, 3], 2);
    let d = Dataset::load(data.path(), None).unwrap();
    assert_eq!((d.shape(), d.classes()), ([3, 8, 8], 2));
    // Example 0's value at (row 0, col 1, channel 2) is its byte 1·3 + 2 in the file, and at
    // channel-major position 2·64 + 1 in memory.
    let file = idx::read_any(&data.path().join(format!("{}.gz", FILES[0])), &[4]).unwrap();
    assert_eq!(d.train.images[2 * 64 + 1], file.data[3 + 2]);
    let run = tempfile::tempdir().unwrap();
    let s = try_train(&config(data.path(), "preset = \"mlp\"", ""), run.path(), None).unwrap();
    assert!(s.result.unwrap().test_accuracy > 0.6);
    // The Opacus CNN does not fit 8 × 8 images: refused before training, naming the field and the shape.
    let e = try_train(&config(data.path(), "preset = \"opacus-cnn\"", ""), tempfile::tempdir().unwrap().path(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("model.preset") && e.contains("[3, 8, 8]"), "{e}");
}

#[test]
fn per_channel_normalisation_applies_each_channels_constants_and_is_checked_against_the_data() {
    use dpgd::data::{Channels, Normalize};
    let data = tempfile::tempdir().unwrap();
    write(data.path(), (60, 20), [4, 4, 3], 2);
    let d = Dataset::load(data.path(), None).unwrap();
    let norm = Normalize { mean: Channels::Each(vec![0.0, 0.5, 1.0]), std: Channels::Each(vec![1.0, 0.5, 0.25]) };
    let mut x = vec![0.0f32; 48];
    d.train.normalised_into(0..1, &norm, &mut x);
    for (k, &v) in x.iter().enumerate() {
        let c = k / 16;
        let want = (f32::from(d.train.images[k]) / 255.0 - [0.0, 0.5, 1.0][c]) / [1.0, 0.5, 0.25][c];
        assert!((v - want).abs() < 1e-5, "value {k} (channel {c}): {v} against {want}");
    }
    // The default for data dpgd does not know: each channel's mean and std over the public test split.
    let Normalize { mean: Channels::Each(mean), std: Channels::Each(_) } = d.default_normalize() else {
        panic!("three channels get three constants")
    };
    let plane = |c: usize| (0..20).flat_map(move |i| (0..16).map(move |p| i * 48 + c * 16 + p));
    for (c, m) in mean.iter().enumerate() {
        let want = plane(c).map(|k| f64::from(d.test.images[k]) / 255.0).sum::<f64>() / 320.0;
        assert!((f64::from(*m) - want).abs() < 1e-6, "channel {c}: {m} against {want}");
    }
    // Given in the config: trains; a list of the wrong length is refused naming the field.
    let given = "[data.normalize]\nmean = [0.4, 0.4, 0.4]\nstd = [0.3, 0.3, 0.3]";
    let run = tempfile::tempdir().unwrap();
    assert!(try_train(&config(data.path(), "preset = \"mlp\"", given), run.path(), None).is_ok());
    let config_text = std::fs::read_to_string(dpgd::train::RunFolder::new(run.path()).config()).unwrap();
    assert!(config_text.contains("mean = [") && config_text.contains("0.4"), "{config_text}");
    let two = "[data.normalize]\nmean = [0.4, 0.4]\nstd = 0.3";
    let e = try_train(&config(data.path(), "preset = \"mlp\"", two), tempfile::tempdir().unwrap().path(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("data.normalize.mean") && e.contains("3 channels"), "{e}");
}

/// The config's layer list takes group norm and average pooling: such a model trains on either
/// engine with the same trainer, resumes, and publishes its spec.
#[test]
fn config_layers_with_group_norm_and_average_pooling_train_on_either_engine_and_resume() {
    for engine in ["fast", "burn"] {
        group_norm_and_average_pooling_on(engine);
    }
}

fn group_norm_and_average_pooling_on(engine: &str) {
    let data = tempfile::tempdir().unwrap();
    write(data.path(), (120, 40), [8, 8, 3], 2);
    let layers = "layers = [{ kind = \"conv2d\", out_channels = 4, kernel = 3, padding = 1 }, \
                  { kind = \"group_norm\", groups = 2 }, { kind = \"relu\" }, \
                  { kind = \"avg_pool2d\", kernel = 2, stride = 2 }, { kind = \"flatten\" }, \
                  { kind = \"linear\", out_features = 2 }]";
    let text =
        config(data.path(), layers, "").replace("seed = 1", &format!("seed = 1\nchunk = 16\nengine = \"{engine}\""));
    let (whole, parts) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let accuracy = try_train(&text, whole.path(), None).unwrap().result.unwrap().test_accuracy;
    assert!(accuracy > 0.6, "{engine}: two brightness classes: {accuracy}");
    let folder = dpgd::train::RunFolder::new(whole.path());
    let spec: dpgd::arch::ModelSpec = dpgd::train::read_json(&folder.model_spec()).unwrap();
    assert_eq!(spec.layers[1], dpgd::arch::LayerSpec::GroupNorm(dpgd::arch::kinds::GroupNorm { groups: 2 }));
    assert!(folder.model().exists(), "{engine}: the burn record");
    let published = std::fs::read_to_string(folder.config()).unwrap();
    assert!(!published.contains("burn module"), "the config's model section is the model: {published}");
    // Stopped after 3 steps and resumed: the same model as the run in one go.
    assert!(try_train(&text, parts.path(), Some(3)).unwrap().result.is_none());
    let resumed = try_train(&text, parts.path(), None).unwrap();
    let theta = |d: &Path| {
        use dpgd::per_example::PerExample;
        let cfg = dpgd::train::TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
        let params = dpgd::model::ConfigModel::new(&spec, &burn::tensor::Device::flex(), 0).unwrap().num_params();
        let expect = dpgd::train::state::Expect { params, examples: 120, max_steps: cfg.max_steps() };
        let state = dpgd::train::state::read(&dpgd::train::RunFolder::new(d).state(), expect).unwrap().unwrap();
        (state.meta.step, state.theta)
    };
    assert_eq!(theta(whole.path()), theta(parts.path()), "resumed run ends where the whole run does");
    assert_eq!(resumed.result.unwrap().test_accuracy, accuracy);
    // Shapes are checked by layer: 4 channels do not split into 3 groups.
    let bad = layers.replace("groups = 2", "groups = 3");
    let e =
        try_train(&config(data.path(), &bad, ""), tempfile::tempdir().unwrap().path(), None).unwrap_err().to_string();
    assert!(e.contains("model.layers[1]") && e.contains("3 groups"), "{e}");
    // A layer that fits only the data's own shape (three channels in three groups; a window
    // the size of the image) is checked against the data, not against MNIST's 1 × 28 × 28.
    let rgb = "layers = [{ kind = \"group_norm\", groups = 3 }, { kind = \"avg_pool2d\", kernel = 8, stride = 1 }, \
               { kind = \"flatten\" }, { kind = \"linear\", out_features = 2 }]";
    assert!(try_train(&config(data.path(), rgb, ""), tempfile::tempdir().unwrap().path(), None).is_ok());
    // A residual connection names an earlier layer of its own shape: the config's field is named.
    let join = |from: usize| {
        layers.replace(
            "{ kind = \"flatten\" }",
            &format!("{{ kind = \"add\", from = {from} }}, {{ kind = \"flatten\" }}"),
        )
    };
    assert!(try_train(&config(data.path(), &join(3), ""), tempfile::tempdir().unwrap().path(), None).is_ok());
    for (from, why) in [(4, "must name an earlier layer (0 to 3)"), (0, "layer 0's output")] {
        let e = try_train(&config(data.path(), &join(from), ""), tempfile::tempdir().unwrap().path(), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("model.layers[4]") && e.contains("add") && e.contains(why), "{e}");
    }
    let bad = layers.replace("kernel = 2, stride = 2", "kernel = 9, stride = 1");
    let e =
        try_train(&config(data.path(), &bad, ""), tempfile::tempdir().unwrap().path(), None).unwrap_err().to_string();
    assert!(e.contains("model.layers[3]") && e.contains("avg_pool2d"), "{e}");
}

#[test]
fn the_class_count_comes_from_public_data_and_explicit_layers_are_checked_against_it() {
    let data = tempfile::tempdir().unwrap();
    write(data.path(), (100, 30), [6, 6, 1], 4);
    // model.layers whose last layer has the wrong width: named.
    let layers = "layers = [{ kind = \"flatten\" }, { kind = \"linear\", out_features = 10 }]";
    let e =
        try_train(&config(data.path(), layers, ""), tempfile::tempdir().unwrap().path(), None).unwrap_err().to_string();
    assert!(e.contains("model.layers") && e.contains("4 logits"), "{e}");
    // The right width trains, without data.classes.
    let four = layers.replace("out_features = 10", "out_features = 4");
    assert!(try_train(&config(data.path(), &four, ""), tempfile::tempdir().unwrap().path(), None).is_ok());
    // data.classes may say more than the test labels show.
    let d = Dataset::load(data.path(), Some(6)).unwrap();
    assert_eq!(d.classes(), 6);
    // A training label outside the test labels' classes is refused, naming the training labels file.
    let fewer = tempfile::tempdir().unwrap();
    write(fewer.path(), (100, 30), [6, 6, 1], 4);
    idx::write_gz(&fewer.path().join(format!("{}.gz", FILES[3])), &[30], &[0u8; 30].map(|_| 1)).unwrap();
    let e = Dataset::load(fewer.path(), None).unwrap_err().to_string();
    assert!(e.contains(FILES[1]) && e.contains("data.classes"), "{e}");
}

#[test]
fn in_memory_data_are_checked_as_files_are() {
    use dpgd::data::Split;
    let split = |n: usize, c: usize| Split {
        images: vec![7; n * 3 * 3 * c],
        features: Vec::new(),
        labels: (0..n).map(|i| (i % 3) as u8).collect(),
        rows: 3,
        cols: 3,
        channels: c,
    };
    let here = Path::new("my-arrays");
    let d = Dataset::in_memory(split(30, 2), split(9, 2), None, here).unwrap();
    assert_eq!((d.shape(), d.classes()), ([2, 3, 3], 3));
    let mut short = split(30, 2);
    short.images.pop();
    let e = Dataset::in_memory(short, split(9, 2), None, here).unwrap_err().to_string();
    assert!(e.contains("my-arrays") && e.contains("do not belong together"), "{e}");
    let e = Dataset::in_memory(split(30, 2), split(9, 1), None, here).unwrap_err().to_string();
    assert!(e.contains("[2, 3, 3]") && e.contains("[1, 3, 3]"), "{e}");
    let e = Dataset::in_memory(split(30, 2), split(9, 2), Some(2), here).unwrap_err().to_string();
    assert!(e.contains("label 2") && e.contains("0..2"), "{e}");
    // Changed data cannot be mistaken for the original on resume: the fingerprints differ.
    let mut other = split(30, 2);
    other.images[0] = 8;
    let d2 = Dataset::in_memory(other, split(9, 2), None, here).unwrap();
    assert_ne!(d.fingerprints()[0], d2.fingerprints()[0]);
    assert_eq!(d.fingerprints()[2], d2.fingerprints()[2]);
}

/// Writes `train.csv` and `test.csv` of three features (one of them the class's signal) and a
/// label column named `label_name`, placed between the features.
fn write_csv(dir: &Path, (n, m): (usize, usize), label_name: &str) {
    for (file, count) in [("train.csv", n), ("test.csv", m)] {
        let mut text = format!("height,{label_name},weight,noise\n");
        for i in 0..count {
            let y = i % 3;
            text += &format!("{},{y},{},{}\n", 1.5 + y as f64 * 2.0, -0.5 * y as f64, (i % 5) as f64 * 0.1);
        }
        std::fs::write(dir.join(file), text).unwrap();
    }
}

#[test]
fn csv_features_train_and_bad_cells_are_refused_by_file_and_line() {
    let data = tempfile::tempdir().unwrap();
    write_csv(data.path(), (240, 60), "species");
    let d = dpgd::data::Dataset::load_with_label(data.path(), None, "species").unwrap();
    // Each feature column is a channel, so normalisation is per feature: by default the test
    // split's mean and std of each column (public), never one number for all columns.
    assert_eq!((d.shape(), d.classes(), d.train.len()), ([3, 1, 1], 3, 240));
    let norm = d.default_normalize();
    let column = |k: usize| -> Vec<f64> { d.test.features.iter().skip(k).step_by(3).map(|&v| f64::from(v)).collect() };
    for k in 0..3 {
        let v = column(k);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!((f64::from(norm.mean.get(k).unwrap()) - mean).abs() < 1e-4, "column {k}: {norm:?}");
    }
    assert_ne!(norm.mean.get(0), norm.mean.get(1), "one number for every column: {norm:?}");
    // A list with one value per feature column is accepted; one of another length names the count.
    let listed = "label_column = \"species\"\n[data.normalize]\nmean = [5.0, -0.5, 0.2]\nstd = [2.0, 0.5, 0.15]";
    let run = tempfile::tempdir().unwrap();
    assert!(try_train(&config(data.path(), "preset = \"mlp\"", listed), run.path(), None).is_ok());
    let short = "label_column = \"species\"\n[data.normalize]\nmean = [5.0, -0.5]\nstd = 1.0";
    let e = try_train(&config(data.path(), "preset = \"mlp\"", short), tempfile::tempdir().unwrap().path(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("2 values for data with 3 channels") && e.contains("feature columns"), "{e}");
    let run = tempfile::tempdir().unwrap();
    let s =
        try_train(&config(data.path(), "preset = \"mlp\"", "label_column = \"species\""), run.path(), None).unwrap();
    let accuracy = s.result.unwrap().test_accuracy;
    assert!(accuracy > 0.9, "test accuracy {accuracy} on separable CSV features");
    // Without the label column's name: refused, listing the columns.
    let e = try_train(&config(data.path(), "preset = \"mlp\"", ""), tempfile::tempdir().unwrap().path(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no column `label`") && e.contains("species") && e.contains("data.label_column"), "{e}");
    // A missing cell, named by file and line.
    let text = std::fs::read_to_string(data.path().join("train.csv")).unwrap();
    let broken: Vec<&str> = text.lines().enumerate().map(|(i, l)| if i == 7 { "1.5,0,2" } else { l }).collect();
    std::fs::write(data.path().join("train.csv"), broken.join("\n")).unwrap();
    let e = dpgd::data::Dataset::load_with_label(data.path(), None, "species").unwrap_err().to_string();
    assert!(e.contains("train.csv") && e.contains("line 8"), "{e}");
}

/// Scattering features of 16 × 16 images (81 channels of 4 × 4) train a linear model, read from
/// the cache on a second load, and the run's model reads the features' shape.
#[test]
fn scattering_features_of_small_images_train_a_linear_model() {
    let data = tempfile::tempdir().unwrap();
    write(data.path(), (300, 60), [16, 16, 1], 3);
    // Not normalised per example (groups = 0): these classes differ only in brightness, which
    // each example's own normalisation would remove.
    let features = "[data.features]\nkind = \"scattering\"\nj = 2\nangles = 8\ngroups = 0";
    let run = tempfile::tempdir().unwrap();
    let s = try_train(&config(data.path(), "preset = \"logistic\"", features), run.path(), None).unwrap();
    assert!(s.result.unwrap().test_accuracy > 0.6);
    let spec: dpgd::arch::ModelSpec =
        dpgd::train::read_json(&dpgd::train::RunFolder::new(run.path()).model_spec()).unwrap();
    assert_eq!(spec.input, [81, 4, 4]);
    // A group count that does not divide 81 is refused naming the field.
    let bad = features.replace("groups = 0", "groups = 10");
    let e = try_train(&config(data.path(), "preset = \"logistic\"", &bad), tempfile::tempdir().unwrap().path(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("data.features.groups"), "{e}");
}

/// One corrupt test label (255 among four classes) would make the derived class count 256 and
/// train a 256-class model without a word: the derived count is refused when the test labels
/// leave most of its classes empty, naming the file, the label, and the fix. This trained
/// silently before.
#[test]
fn a_corrupt_test_label_that_would_derive_hundreds_of_empty_classes_is_refused() {
    let data = tempfile::tempdir().unwrap();
    write(data.path(), (100, 30), [6, 6, 1], 4);
    let mut labels: Vec<u8> = (0..30).map(|i| (i % 4) as u8).collect();
    labels[17] = 255;
    idx::write_gz(&data.path().join(format!("{}.gz", FILES[3])), &[30], &labels).unwrap();
    let e = Dataset::load(data.path(), None).unwrap_err().to_string();
    assert!(e.contains(FILES[3]) && e.contains("256") && e.contains("255 at example 17"), "{e}");
    assert!(e.contains("only 5 of those classes") && e.contains("data.classes"), "{e}");
    // Saying how many classes there are turns it into the plain out-of-range label error.
    let e = Dataset::load(data.path(), Some(4)).unwrap_err().to_string();
    assert!(e.contains("label 255 of example 17"), "{e}");
    // The same for arrays in memory.
    let split = |labels: Vec<u8>| dpgd::data::Split {
        images: vec![7; labels.len() * 4],
        features: Vec::new(),
        labels,
        rows: 2,
        cols: 2,
        channels: 1,
    };
    let e = Dataset::in_memory(split(vec![0, 1, 2]), split(labels), None, Path::new("arrays")).unwrap_err().to_string();
    assert!(e.contains("arrays") && e.contains("255 at example 17"), "{e}");
    // Test labels that cover the classes they derive are accepted as before, gaps and all.
    let mut sparse: Vec<u8> = (0..30).map(|i| (i % 10) as u8).collect();
    sparse.retain(|&y| y != 4);
    assert_eq!(Dataset::in_memory(split(vec![0, 1]), split(sparse), None, Path::new("a")).unwrap().classes(), 10);
}
