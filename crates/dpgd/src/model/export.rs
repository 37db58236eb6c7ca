//! `model.safetensors`: the returned model in a format others read (Hugging Face safetensors,
//! PyTorch's tensor layout), carrying its own architecture and input normalisation in the
//! file's metadata, so it loads without the run's config.
//!
//! Tensors are named `layers.{i}.weight` (`[out, in, k, k]` for a convolution, `[out, in]` for
//! a linear layer, as PyTorch's `Conv2d` / `Linear`) and `layers.{i}.bias`, `i` the layer's
//! index in the architecture; metadata `dpgd.architecture` is the [`ModelSpec`] as JSON and
//! `dpgd.normalize` the pixel normalisation.

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};

use crate::arch::ModelSpec;
use crate::data::Normalize;
use crate::error::{Error, Result};
use crate::per_example::Network;

/// A model read back from a `model.safetensors` file.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportedModel {
    /// The compiled architecture.
    pub net: Network,
    /// Its flat parameters θ.
    pub theta: Vec<f32>,
    /// The input normalisation it was trained with.
    pub normalize: Normalize,
}

fn bytes_of(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The named tensors of θ: (name, shape, offset, length).
fn tensors(net: &Network) -> Vec<(String, Vec<usize>, usize, usize)> {
    let mut out = Vec::new();
    for (i, layer) in net.layers().iter().enumerate() {
        let Some(p) = layer.params() else { continue };
        let shape = match layer {
            crate::per_example::Layer::Conv2d(c) => {
                vec![c.cout, c.geometry.cin, c.geometry.k, c.geometry.k]
            }
            crate::per_example::Layer::Linear(l) => vec![l.dout, l.din],
            _ => vec![p.weight_len],
        };
        out.push((format!("layers.{i}.weight"), shape, p.weight, p.weight_len));
        if let Some(b) = p.bias {
            out.push((format!("layers.{i}.bias"), vec![p.bias_len], b, p.bias_len));
        }
    }
    out
}

/// Writes `theta` of `net` (trained with normalisation `normalize`) to `path`, atomically.
///
/// # Errors
/// If the file cannot be written.
pub fn save(net: &Network, theta: &[f32], normalize: &Normalize, path: &Path) -> Result<()> {
    let bad = |e: &dyn std::fmt::Display| Error::Record(format!("{}: {e}", path.display()));
    let data: Vec<(String, Vec<usize>, Vec<u8>)> =
        tensors(net).into_iter().map(|(n, s, o, l)| (n, s, bytes_of(&theta[o..o + l]))).collect();
    let views = data
        .iter()
        .map(|(n, s, b)| TensorView::new(Dtype::F32, s.clone(), b).map(|v| (n.clone(), v)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    meta.insert("dpgd.architecture".to_string(), serde_json::to_string(net.spec()).map_err(|e| bad(&e))?);
    meta.insert("dpgd.normalize".to_string(), serde_json::to_string(&normalize).map_err(|e| bad(&e))?);
    let mut bytes = safetensors::serialize(views, Some(meta)).map_err(|e| bad(&e))?;
    canonical_header(&mut bytes).map_err(|e| bad(&e))?;
    crate::train::state::atomic_write(path, &bytes)
}

/// Rewrites a safetensors file's JSON header with its keys sorted, in place, so that the same
/// model always gives the same bytes (and published checksums agree): `safetensors` writes its
/// metadata from a `HashMap`, in a random order. The header keeps its length (the same JSON,
/// reordered, padded with spaces as the format allows), so no offset changes.
fn canonical_header(bytes: &mut [u8]) -> std::result::Result<(), String> {
    let len_bytes: [u8; 8] = bytes.get(..8).and_then(|b| b.try_into().ok()).ok_or("no header length")?;
    let len = usize::try_from(u64::from_le_bytes(len_bytes)).map_err(|e| e.to_string())?;
    let header = bytes.get_mut(8..8 + len).ok_or("header longer than the file")?;
    // serde_json's default map is a BTreeMap: parsing and printing sorts every object's keys.
    let value: serde_json::Value = serde_json::from_slice(header).map_err(|e| e.to_string())?;
    let sorted = serde_json::to_vec(&value).map_err(|e| e.to_string())?;
    if sorted.len() > len {
        return Err(format!("the sorted header ({} bytes) is longer than the original ({len})", sorted.len()));
    }
    header[..sorted.len()].copy_from_slice(&sorted);
    header[sorted.len()..].fill(b' ');
    Ok(())
}

/// Reads a model written by [`save`], checking its architecture and every tensor's name and
/// shape.
///
/// # Errors
/// [`Error::Record`] naming the file: not safetensors, no dpgd architecture, a missing or
/// mis-shaped tensor, or a file larger than the memory limit.
pub fn load(path: &Path) -> Result<ExportedModel> {
    let bad = |m: String| Error::Record(format!("{}: {m}", path.display()));
    let len = std::fs::metadata(path).map_err(Error::io(path))?.len();
    crate::memory::check(&format!("reading {}", path.display()), Some(len), "this is not a dpgd model file")?;
    let bytes = std::fs::read(path).map_err(Error::io(path))?;
    let (_, meta) =
        safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| bad(format!("not a safetensors file ({e})")))?;
    let info = meta.metadata().clone().unwrap_or_default();
    let spec: ModelSpec = info
        .get("dpgd.architecture")
        .ok_or_else(|| bad("no dpgd.architecture in its metadata: not written by dpgd".into()))
        .and_then(|a| serde_json::from_str(a).map_err(|e| bad(format!("its architecture does not parse ({e})"))))?;
    let normalize: Normalize = match info.get("dpgd.normalize") {
        Some(n) => serde_json::from_str(n).map_err(|e| bad(format!("its normalisation does not parse ({e})")))?,
        None => Normalize::MNIST,
    };
    let net = Network::new(&spec).map_err(|e| bad(format!("its architecture does not compile: {e}")))?;
    normalize.check(spec.input[0]).map_err(|e| bad(format!("its normalisation does not fit its model: {e}")))?;
    let file =
        safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(format!("not a safetensors file ({e})")))?;
    let mut theta = vec![0.0f32; net.num_params()];
    for (name, shape, offset, len) in tensors(&net) {
        let t = file.tensor(&name).map_err(|_| bad(format!("tensor {name} is missing")))?;
        if t.dtype() != Dtype::F32 || t.shape() != shape.as_slice() {
            return Err(bad(format!("tensor {name} is {:?} {:?}, expected F32 {shape:?}", t.dtype(), t.shape())));
        }
        for (dst, c) in theta[offset..offset + len].iter_mut().zip(t.data().chunks_exact(4)) {
            *dst = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
    }
    Ok(ExportedModel { net, theta, normalize })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn round_trips_with_its_architecture() {
        let net = Network::new(&ModelSpec::opacus_cnn()).unwrap();
        let theta = net.init_params(&mut rand_chacha::ChaCha8Rng::seed_from_u64(1));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let norm = Normalize::all(0.5, 0.25);
        save(&net, &theta, &norm, &path).unwrap();
        let m = load(&path).unwrap();
        assert_eq!((m.net, m.theta, m.normalize), (net, theta, norm));
        std::fs::write(&path, b"not a model").unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("model.safetensors"));
    }

    /// Issue "privacy round 2", item 12: two saves of one model are byte-identical (the
    /// metadata came from a `HashMap` in random order, so published checksums differed).
    #[test]
    fn the_same_model_gives_the_same_bytes() {
        let net = Network::new(&ModelSpec::opacus_cnn()).unwrap();
        let theta = net.init_params(&mut rand_chacha::ChaCha8Rng::seed_from_u64(2));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let mut first = None;
        for _ in 0..12 {
            save(&net, &theta, &Normalize::MNIST, &path).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(first.get_or_insert_with(|| bytes.clone()), &bytes, "two saves of one model differ");
        }
        assert_eq!(load(&path).unwrap().theta, theta);
    }
}
