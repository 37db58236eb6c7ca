//! `dpgd eval` and `dpgd predict`: use a run's model without its config — it is read from
//! `publishable/model.safetensors`, which carries its architecture, its normalisation and, for
//! a model of `[data.features]`, the transform and the image shape it takes.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use dpgd::data::{InputForm, Split};
use dpgd::model::export::{self, ExportedModel};
use dpgd::train::{RunFolder, TrainConfig};

#[derive(Debug, Args)]
pub(crate) struct EvalArgs {
    /// A run folder or a model.safetensors file.
    model: PathBuf,
    /// A dataset folder whose test split to evaluate on: MNIST-format IDX files, or CSV
    /// (`test.csv`, with the run's label column) (default: the run's data).
    #[arg(long)]
    data: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct PredictArgs {
    /// A run folder or a model.safetensors file (a model trained on `[data.features]` carries
    /// its transform: images of the shape it was trained on are transformed the same way).
    model: PathBuf,
    /// The examples: for a model of images, an IDX file (gzip or raw, `n × rows × cols` bytes) or
    /// a CSV file with one image per line (rows·cols pixel values 0–255); for a model trained on
    /// CSV columns, a CSV file with those columns (found by name under a header row, other columns
    /// such as the label ignored; or, without a header, exactly those columns in order).
    #[arg(long)]
    input: PathBuf,
    /// Print one JSON object (the predicted classes and each image's class probabilities).
    #[arg(long)]
    json: bool,
}

/// The model of a run folder or a safetensors file.
fn model(path: &Path) -> Result<ExportedModel> {
    let file = if path.is_dir() { RunFolder::new(path).model_safetensors() } else { path.to_path_buf() };
    if !file.exists() {
        bail!("{}: no model.safetensors (is the run finished?)", file.display());
    }
    let m = export::load(&file)?;
    // A file from before models carried their feature transform: its run says it had one.
    let config = RunFolder::new(path).config();
    if m.features.is_none()
        && path.is_dir()
        && config.exists()
        && TrainConfig::from_file(&config, &[]).is_ok_and(|c| c.data.features.is_some())
    {
        bail!(
            "{}: the model was trained on [data.features], but the file does not record the transform (written \
             by an older dpgd): train it again",
            file.display()
        );
    }
    Ok(m)
}

pub(crate) fn eval(a: EvalArgs) -> Result<()> {
    let m = model(&a.model)?;
    // The run's data section (its label column too), unless --data names another folder.
    let run_data = TrainConfig::from_file(&RunFolder::new(&a.model).config(), &[]).map(|c| c.data);
    let mut data_cfg = match (a.data, run_data) {
        (Some(d), run) => dpgd::train::DataConfig { dir: d, ..run.unwrap_or_default() },
        (None, run) => run.with_context(|| "give --data DIR")?,
    };
    data_cfg.classes = Some(m.classes());
    // The model file says how its input is made: the transform is applied to the test split
    // alone (not to the training split, as loading the run's data section would).
    data_cfg.features = None;
    let dir = data_cfg.dir.clone();
    let data = data_cfg.load()?;
    let features;
    let test = match &m.features {
        Some(f) => {
            features = f.apply(&data.test).with_context(|| format!("the test images in {}", dir.display()))?;
            features.head(0)
        }
        None => data.test.head(0),
    };
    if test.pixels() != m.input_len() {
        bail!("the images in {} have {} pixels; the model expects {}", dir.display(), test.pixels(), m.input_len());
    }
    let correct = m.count_correct(test);
    println!(
        "test accuracy {:.2} % ({correct} of {} test examples in {})",
        100.0 * correct as f64 / test.len() as f64,
        test.len(),
        dir.display()
    );
    Ok(())
}

/// Images from an IDX or CSV file, checked against the model's input size.
fn images(path: &Path, pixels: usize) -> Result<Split> {
    let is_csv = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    if !is_csv {
        let s = dpgd::data::read_images(path)?;
        if s.pixels() != pixels {
            bail!(
                "{}: images of shape {:?} (channels, height, width); the model expects {pixels} values",
                path.display(),
                s.shape()
            );
        }
        return Ok(s);
    }
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    let mut images = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let row: Vec<u8> =
            line.split(',').map(|v| v.trim().parse::<u8>()).collect::<Result<_, _>>().with_context(|| {
                format!("{} line {}: pixel values must be whole numbers 0-255", path.display(), i + 1)
            })?;
        if row.len() != pixels {
            bail!("{} line {}: {} values; the model expects {pixels}", path.display(), i + 1, row.len());
        }
        images.extend(row);
    }
    let n = images.len() / pixels.max(1);
    Ok(Split { images, features: Vec::new(), labels: vec![0; n], rows: pixels, cols: 1, channels: 1 })
}

pub(crate) fn predict(a: PredictArgs) -> Result<()> {
    let m = model(&a.model)?;
    // A model trained on features classifies the features of the images: the transform, and
    // the image shape it takes, are in the model file.
    let data = match &m.features {
        Some(f) => {
            if a.input.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) {
                bail!(
                    "{}: this model reads [data.features] of images: give an IDX file of images, not CSV",
                    a.input.display()
                );
            }
            let raw = dpgd::data::read_images(&a.input)?;
            let out = f.apply(&raw).with_context(|| a.input.display().to_string())?;
            if out.pixels() != m.input_len() {
                bail!(
                    "{}: images of shape {:?} give {} feature values; the model expects {}",
                    a.input.display(),
                    raw.shape(),
                    out.pixels(),
                    m.input_len()
                );
            }
            out
        }
        None => match &m.form {
            InputForm::Columns { names } => {
                if !a.input.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) {
                    bail!(
                        "{}: this model reads the CSV columns {names:?}: give a CSV file with those columns",
                        a.input.display()
                    );
                }
                dpgd::data::csv::read_features(&a.input, names)?
            }
            InputForm::Pixels => images(&a.input, m.input_len())?,
        },
    };
    if data.pixels() != m.input_len() {
        bail!("{}: examples of {} values; the model expects {}", a.input.display(), data.pixels(), m.input_len());
    }
    let (mut predicted, mut probabilities) = (Vec::new(), Vec::new());
    for z in m.logits(data.head(0)).chunks_exact(m.classes()) {
        let top = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f64> = z.iter().map(|&v| f64::from(v - top).exp()).collect();
        let s: f64 = e.iter().sum();
        predicted.push(z.iter().enumerate().fold(0, |b, (i, &v)| if v > z[b] { i } else { b }));
        probabilities.push(e.iter().map(|v| v / s).collect::<Vec<_>>());
    }
    if a.json {
        println!("{}", serde_json::json!({ "predicted": predicted, "probabilities": probabilities }));
    } else {
        for p in predicted {
            println!("{p}");
        }
    }
    Ok(())
}
