//! The library's layers, bottom to top: a module may use the modules below it, never one above
//! it, and no two modules use each other. The order is the architecture (accounting at the
//! bottom; data; per-example engines and layers; methods and trainer; sweeps on top); this test
//! reads every source file's `crate::` paths (outside comments and test modules) and fails on an
//! upward edge, naming the file and line.

use std::path::{Path, PathBuf};

/// Bottom first. Modules on one line are on one level: they may not use each other.
const LAYERS: &[&[&str]] = &[
    &["accounting", "simd"],
    &["error"],
    &["files", "memory", "device", "noise", "plot", "collective"],
    &["cube"],
    &["clip", "data", "nn"],
    &["arch"],
    &["per_example"],
    &["model"],
    &["train"],
    &["audit", "sweep"],
];

fn level(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `(line number, module)` for every `crate::module` a file's code names, test modules and
/// comments left out.
fn uses(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("#[cfg(test)]") {
            break; // test modules sit at the end of a file
        }
        if code.starts_with("//") {
            continue;
        }
        let code = code.split("//").next().unwrap_or("");
        for (at, _) in code.match_indices("crate::") {
            let name: String = code[at + 7..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                .collect();
            found.push((i + 1, name));
        }
    }
    found
}

#[test]
fn no_module_uses_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut upward = Vec::new();
    let mut checked = 0;
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        let Some(own) = level(&top) else {
            assert!(["lib", "main"].contains(&top.as_str()), "{}: add module `{top}` to LAYERS", rel.display());
            continue;
        };
        for (line, used) in uses(&std::fs::read_to_string(file).unwrap()) {
            let Some(theirs) = level(&used) else { continue };
            checked += 1;
            if used != top && theirs >= own {
                upward.push(format!("{}:{line} ({top}) uses crate::{used}", rel.display()));
            }
        }
    }
    assert!(checked > 100, "only {checked} crate paths found: the scan is broken");
    assert!(upward.is_empty(), "edges that go up or sideways:\n{}", upward.join("\n"));
}
