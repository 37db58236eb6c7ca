//! Running a search: K and the draws made durable before the first candidate trains, each
//! candidate trained (or resumed) and scored with noise, each score durable before it is used.

use std::path::{Path, PathBuf};

use rand::RngExt;

use super::publish::{candidate, publish};
use super::types::{Search, SearchObserver, SearchResult, SearchState};
use crate::error::{Error, Result};
use crate::noise::Stream;
use crate::train::{RunOptions, read_json, run};

/// Runs `search` in `dir` (resuming it), and returns what it publishes. `stop_after` =
/// (candidate, steps) stops inside that candidate's run, as a kill would.
///
/// # Errors
/// A folder holding another search; a failing candidate; unreadable or unwritable files.
/// `Ok(None)` when stopped by `stop_after`.
pub fn run_search(
    search: &Search,
    dir: &Path,
    observer: &mut dyn SearchObserver,
    stop_after: Option<(usize, usize)>,
) -> Result<Option<SearchResult>> {
    let mut state = start(search, dir)?;
    let published = dir.join("publishable").join("search.json");
    if published.exists() {
        return read_json(&published).map(Some);
    }
    for i in 0..state.draws.len() {
        if state.scores[i].is_some() {
            continue;
        }
        let (cfg, folder) = candidate(search, &state, i, dir)?;
        let opts = RunOptions {
            stop_after: stop_after.filter(|&(c, _)| c == i).map(|(_, s)| s),
            candidate: true,
            ..Default::default()
        };
        let summary = run(&cfg, &search.data, folder.root(), &opts, observer.candidate(i).as_mut())?;
        if !summary.finished {
            return Ok(None);
        }
        let model = crate::model::export::load(&folder.model_safetensors())?;
        let correct = model.count_correct(search.validation.head(0)) as i64;
        let mut rng = search.seed.rng(Stream::release(SCORE_STREAMS, i))?;
        state.scores[i] = Some(correct.saturating_add(search.score.sample(&mut rng)));
        write_state(dir, &state)?;
    }
    publish(search, &state, dir).map(Some)
}

/// The noise streams of the scores count down from here (far from the runs' and the draws').
const SCORE_STREAMS: u64 = 1 << 61;

/// The state of the search in `dir`: read, or drawn and written before anything trains.
fn start(search: &Search, dir: &Path) -> Result<SearchState> {
    let identity = identity(search)?;
    let path = state_path(dir);
    if path.exists() {
        let state: SearchState = read_json(&path)?;
        if state.scores.len() != state.draws.len() || state.draws.iter().any(|&j| j >= search.points.len()) {
            return Err(Error::file(
                &path,
                "the draws and scores do not belong together (the file is damaged): delete the search folder to \
                 start over",
            ));
        }
        if state.identity != identity {
            return Err(Error::config(
                format!("{}", dir.display()),
                "this folder holds a search made with other settings (grid, target, data or candidates): give \
                 another --out, or delete the folder to start over",
            ));
        }
        return Ok(state);
    }
    let mut rng = search.seed.rng(Stream::release(SCORE_STREAMS + 1, 0))?;
    let k = search.guarantee.repetitions.sample(rng.random::<f64>());
    let k = usize::try_from(k).map_err(|_| Error::State("K does not fit in memory".into()))?;
    let draws = (0..k).map(|_| rng.random_range(0..search.points.len())).collect();
    let state = SearchState { identity, draws, scores: vec![None; k] };
    write_state(dir, &state)?;
    Ok(state)
}

fn state_path(dir: &Path) -> PathBuf {
    dir.join("confidential").join("search.json")
}

fn write_state(dir: &Path, state: &SearchState) -> Result<()> {
    let text = serde_json::to_string_pretty(state).map_err(Error::serialise("a search's state"))?;
    crate::files::atomic_write(&state_path(dir), text.as_bytes())
}

/// A hash of everything the draws and scores belong to.
fn identity(search: &Search) -> Result<String> {
    let mut text = serde_json::to_string(&search.guarantee).map_err(Error::serialise("a search's guarantee"))?;
    text += &format!("{:?}", search.seed);
    for p in &search.points {
        text += &p.config.config().to_value()?.to_string();
    }
    for f in search.data.fingerprints() {
        text += &f.sha256;
    }
    Ok(crate::data::idx::hex(&<sha2::Sha256 as sha2::Digest>::digest(text.as_bytes())))
}
