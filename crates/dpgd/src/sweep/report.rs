//! A sweep's results: one row per finished run (`results.jsonl`, `results.csv`), a Markdown
//! summary grouped over seeds, and plots.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use super::plan::PlannedRun;
use crate::error::{Error, Result};
use crate::plot::{Panel, Series, SeriesLabelPosition, line_charts};

/// Writes `results.jsonl` and `results.csv`: one row per finished run (case and grid values,
/// the returned model's test accuracy, the accuracy after k = B_norm/C² steps, ε and the
/// privacy report).
pub fn write_results(dir: &Path, runs: &[PlannedRun]) -> Result<Vec<Value>> {
    let mut rows = Vec::new();
    for r in runs {
        let run_dir = dir.join("runs").join(&r.id);
        let Ok(text) = std::fs::read_to_string(run_dir.join("privacy.json")) else { continue };
        let privacy: Value = serde_json::from_str(&text).map_err(|e| Error::Record(e.to_string()))?;
        let result: Value = read_json(&run_dir.join("result.json"))?;
        rows.push(json!({
            "id": r.id, "point": r.point,
            "test_accuracy": result["test_accuracy"], "test_accuracy_at_k": result["test_accuracy_at_k"],
            "k": result["k"], "steps_run": result["steps_run"], "selected_step": result["selected_step"],
            "epsilon": privacy["epsilon"], "sigma": privacy["training"]["sigma"], "privacy": privacy,
        }));
    }
    let jsonl: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    std::fs::write(dir.join("results.jsonl"), jsonl).map_err(Error::io(dir.join("results.jsonl")))?;
    let fields: Vec<String> = runs.first().map(|r| r.point.keys().cloned().collect()).unwrap_or_default();
    let stats = ["test_accuracy", "test_accuracy_at_k", "k", "steps_run", "selected_step", "sigma", "epsilon"];
    let mut csv = format!("id,{},{}\n", fields.join(","), stats.join(","));
    for r in &rows {
        let vals: Vec<String> = fields.iter().map(|f| r["point"][f].as_str().unwrap_or("").replace(',', ";")).collect();
        let nums: Vec<String> = stats.iter().map(|s| r[s].to_string()).collect();
        csv += &format!("{},{},{}\n", r["id"].as_str().unwrap_or(""), vals.join(","), nums.join(","));
    }
    std::fs::write(dir.join("results.csv"), csv).map_err(Error::io(dir.join("results.csv")))?;
    Ok(rows)
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    serde_json::from_str(&text).map_err(|e| Error::Record(format!("{}: {e}", path.display())))
}

/// Mean ± std of `rows[key] × scale` over the rows that have it.
fn stat(rows: &[Value], key: &str, scale: f64) -> Option<(f64, f64)> {
    let xs: Vec<f64> = rows.iter().filter_map(|r| r[key].as_f64()).map(|x| x * scale).collect();
    (!xs.is_empty()).then(|| mean_std(&xs))
}

/// Markdown summary of a sweep's `results.jsonl`: mean ± std over seeds of the returned
/// model's test accuracy, of the accuracy after k = B_norm/C² steps (for a filtered run,
/// plain private GD of the same σ) and of ε, grouped by every non-seed field. Also draws
/// `report.png` and, if the runs released noisy active counts, `active.png`.
pub fn report(dir: &Path) -> Result<String> {
    let path = dir.join("results.jsonl");
    let text = std::fs::read_to_string(&path).map_err(Error::io(&path))?;
    let rows: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::Record(format!("{}: {e}", path.display())))?;
    let mut groups: BTreeMap<Vec<(String, String)>, Vec<Value>> = BTreeMap::new();
    for r in rows {
        groups.entry(group_fields(&r)).or_default().push(r);
    }
    let mut out = String::from(
        "| configuration | runs | test accuracy (%) | after k = B_norm/C² steps (%) | steps run | epsilon |\n\
         |---|---|---|---|---|---|\n",
    );
    let pm = |s: Option<(f64, f64)>, digits: usize| {
        s.map_or("–".to_string(), |(m, sd)| format!("{m:.digits$} ± {sd:.digits$}"))
    };
    for (key, g) in &groups {
        out += &format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            if key.is_empty() { "(base)".to_string() } else { join(key) },
            g.len(),
            pm(stat(g, "test_accuracy", 100.0), 2),
            pm(stat(g, "test_accuracy_at_k", 100.0), 2),
            pm(stat(g, "steps_run", 1.0), 0),
            stat(g, "epsilon", 1.0).map_or("–".into(), |(m, _)| format!("{m:.3}")),
        );
    }
    plot(dir, &groups)?;
    Ok(out)
}

/// A run's grid fields other than the seed, as (field, value) pairs in field order.
fn group_fields(r: &Value) -> Vec<(String, String)> {
    r["point"]
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| *k != "train.seed")
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").trim_matches('"').to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn join(fields: &[(String, String)]) -> String {
    fields.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

/// Column `col` of a run's `metrics.csv` as (step, value) points.
fn metric(dir: &Path, id: &str, col: usize) -> Vec<(f64, f64)> {
    let Ok(text) = std::fs::read_to_string(dir.join("runs").join(id).join("metrics.csv")) else { return Vec::new() };
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((f.first()?.parse().ok()?, f.get(col)?.parse().ok()?))
        })
        .collect()
}

/// `report.png`: mean test accuracy against the step, one panel per value of the first grid
/// field when there are two or more (so a sweep over cases × calibrations stays readable), one
/// series per group, a vertical line at each k = B_norm/C²; `active.png`: the noisy active
/// counts, one panel per group, every seed.
fn plot(dir: &Path, groups: &BTreeMap<Vec<(String, String)>, Vec<Value>>) -> Result<()> {
    let mut accuracy: BTreeMap<String, (Vec<Series>, Vec<f64>)> = BTreeMap::new();
    let mut active = Vec::new();
    for (fields, g) in groups {
        let key = join(fields);
        let (panel, label) = match fields.split_first() {
            Some((first, rest)) if !rest.is_empty() => (join(std::slice::from_ref(first)), join(rest)),
            _ => (String::new(), key.clone()),
        };
        let ids: Vec<&str> = g.iter().filter_map(|r| r["id"].as_str()).collect();
        // Mean over seeds of the test accuracy at the steps every seed evaluated.
        let mut by_step: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for id in &ids {
            for (s, a) in metric(dir, id, 3) {
                by_step.entry(s as u64).or_default().push(100.0 * a);
            }
        }
        let points =
            by_step.iter().filter(|(_, v)| v.len() == ids.len()).map(|(s, v)| (*s as f64, mean_std(v).0)).collect();
        let k = g.first().and_then(|r| r["k"].as_f64());
        let (series, markers) = accuracy.entry(panel).or_default();
        series.push(Series { label, points });
        markers.extend(k.filter(|k| !markers.contains(k)));
        let counts: Vec<Series> = ids
            .iter()
            .zip(g)
            .map(|(id, r)| Series {
                label: format!("seed {}", r["point"]["train.seed"].as_str().unwrap_or("")),
                points: metric(dir, id, 4),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if !counts.is_empty() {
            active.push(Panel {
                title: format!("active points (noisy count): {key}"),
                x_label: "step".into(),
                y_label: "active points".into(),
                series: counts,
                markers: k.into_iter().collect(),
                y_from_zero: true,
                legend: SeriesLabelPosition::LowerLeft,
            });
        }
    }
    let accuracy: Vec<Panel> = accuracy
        .into_iter()
        .map(|(panel, (series, markers))| Panel {
            title: if panel.is_empty() {
                "test accuracy (mean over seeds)".into()
            } else {
                format!("test accuracy (mean over seeds): {panel}")
            },
            x_label: "step".into(),
            y_label: "test accuracy (%)".into(),
            series,
            markers,
            y_from_zero: false,
            legend: SeriesLabelPosition::LowerRight,
        })
        .collect();
    line_charts(&dir.join("report.png"), &accuracy)?;
    if !active.is_empty() {
        line_charts(&dir.join("active.png"), &active)?;
    }
    Ok(())
}

fn mean_std(xs: &[f64]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = if xs.len() > 1 { xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    (mean, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png_height(path: &Path) -> u32 {
        let bytes = std::fs::read(path).unwrap();
        u32::from_be_bytes(bytes[20..24].try_into().unwrap())
    }

    #[test]
    fn accuracy_plot_has_a_panel_per_value_of_the_first_field_and_labels_lose_their_quotes() {
        let tmp = tempfile::tempdir().unwrap();
        let mut rows = String::new();
        for case in ["a", "b", "c"] {
            for conversion in ["x", "y"] {
                let id = format!("{case}-{conversion}");
                let run = tmp.path().join("runs").join(&id);
                std::fs::create_dir_all(&run).unwrap();
                let metrics = "step,seconds,epsilon_so_far,test_accuracy\n1,0.1,0.1,0.5\n2,0.1,0.2,0.6\n";
                std::fs::write(run.join("metrics.csv"), metrics).unwrap();
                let point = json!({"case": format!("\"{case}\""), "privacy.conversion": format!("\"{conversion}\""), "train.seed": "1"});
                let row = json!({"id": id, "point": point, "test_accuracy": 0.6, "test_accuracy_at_k": 0.6, "steps_run": 2, "epsilon": 1.0, "k": 2});
                rows += &format!("{row}\n");
            }
        }
        std::fs::write(tmp.path().join("results.jsonl"), rows).unwrap();
        let table = report(tmp.path()).unwrap();
        assert!(table.contains("| case=b, privacy.conversion=y | 1 | 60.00 ± 0.00 |"), "{table}");
        // Three cases, two calibrations each: three panels of 360 pixels, not one crowded one.
        assert_eq!(png_height(&tmp.path().join("report.png")), 3 * 360);
        assert!(!tmp.path().join("active.png").exists(), "no active counts were released");
    }
}
