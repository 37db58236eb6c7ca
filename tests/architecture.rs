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
    &["cube", "kernels"],
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

/// A source file: its module path, its file and its code lines (number, text).
type Source = (Vec<String>, PathBuf, Vec<(usize, String)>);

/// Every source file as a module path (`train/config/valid.rs` is `train::config::valid`, a
/// `mod.rs` its folder's module), with its code lines: test modules and comments left out.
fn modules(src: &Path) -> Vec<Source> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut out = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap().with_extension("");
        let mut path: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        if path.last().is_some_and(|l| l == "mod") {
            path.pop();
        }
        if path == ["lib"] || path == ["main"] {
            continue;
        }
        let mut code = Vec::new();
        for (i, line) in std::fs::read_to_string(&file).unwrap().lines().enumerate() {
            let c = line.trim_start();
            if c.starts_with("#[cfg(test)]") {
                break;
            }
            if !c.starts_with("//") {
                code.push((i + 1, c.split("//").next().unwrap_or("").to_string()));
            }
        }
        out.push((path, file, code));
    }
    out
}

/// The identifiers of a path written at `at` in `code` (`crate::a::b::C` from the `a`).
fn path_at(code: &str, at: usize) -> Vec<String> {
    code[at..]
        .split("::")
        .map(|s| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>())
        .take_while(|s| !s.is_empty())
        .collect()
}

/// Every module path that `code` (a line of module `own`) names by `crate::`, `super::` or
/// `self::`, a braced `use` group's members included, as the longest path of a known module:
/// the file-level edges of the module graph (a name re-exported by a module counts as that
/// module's; `mod` declarations and `pub use` re-exports are structure, not use).
fn named_modules(own: &[String], code: &str, known: &std::collections::BTreeSet<Vec<String>>) -> Vec<Vec<String>> {
    let base = |head: &str| -> Vec<String> {
        match head {
            "crate" => Vec::new(),
            "super" => own[..own.len().saturating_sub(1)].to_vec(),
            _ => own.to_vec(),
        }
    };
    let mut paths: Vec<Vec<String>> = Vec::new();
    for head in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(head) {
            if at > 0 && code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut p = base(&head[..head.len() - 2]);
            p.extend(path_at(code, at + head.len()));
            paths.push(p.clone());
            // `use head::a::{b, c::d}`: each member too.
            if let Some(open) = code[at..].find('{') {
                let group = &code[at + open + 1..];
                let group = group.split('}').next().unwrap_or("");
                let prefix: Vec<String> = {
                    let mut q = base(&head[..head.len() - 2]);
                    q.extend(path_at(code, at + head.len()));
                    q
                };
                for member in group.split(',') {
                    let member = member.trim().split(" as ").next().unwrap_or("");
                    let mut q = prefix.clone();
                    q.extend(member.split("::").map(str::to_string).filter(|s| !s.is_empty() && s != "self"));
                    paths.push(q);
                }
            }
        }
    }
    // A child module named by its bare name (`fetch::KNOWN`, `use setup::Setup`).
    for (at, _) in code.match_indices("::") {
        let start = code[..at].rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
        // Not a path's later segment (`a::b`), a method's turbofish (`x.parse::<T>()`) or a
        // generic (`Vec::<u8>`).
        if start > 0 && code[..start].ends_with([':', '.']) || code[at + 2..].starts_with('<') {
            continue;
        }
        let mut child = own.to_vec();
        child.push(code[start..at].to_string());
        if known.contains(&child) {
            child.extend(path_at(code, at + 2));
            paths.push(child);
        }
    }
    paths
        .into_iter()
        .filter_map(|p| (1..=p.len()).rev().map(|k| p[..k].to_vec()).find(|k| known.contains(k)))
        .filter(|m| m != own)
        .collect()
}

/// No cycle anywhere: the graph of every source file's module paths (`crate::`, `super::`,
/// `self::` and a child module's bare name; test modules and comments left out) has no cycle,
/// between top-level modules or files inside one. What it cannot see: a method called on a type
/// defined elsewhere, and an item a module re-exports from a child (`pub use`, counted as
/// structure, not use) and then names bare — it reads paths, not types.
#[test]
fn no_cycle_between_any_two_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    let known: std::collections::BTreeSet<Vec<String>> = mods.iter().map(|(p, _, _)| p.clone()).collect();
    let mut edges: std::collections::BTreeMap<Vec<String>, std::collections::BTreeMap<Vec<String>, String>> =
        std::collections::BTreeMap::new();
    for (own, file, code) in &mods {
        for (line, text) in code {
            let structural = ["mod ", "pub mod ", "pub use ", "pub(crate) use ", "pub(super) use "];
            if structural.iter().any(|s| text.starts_with(s)) {
                continue;
            }
            for used in named_modules(own, text, &known) {
                let at = format!("{}:{line}", file.strip_prefix(&src).unwrap().display());
                edges.entry(own.clone()).or_default().entry(used).or_insert(at);
            }
        }
    }
    assert!(edges.values().map(|e| e.len()).sum::<usize>() > 200, "too few edges: the scan is broken");
    // Depth-first search for a back edge.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut mark: std::collections::BTreeMap<&Vec<String>, Mark> = known.iter().map(|k| (k, Mark::New)).collect();
    fn visit<'a>(
        v: &'a Vec<String>,
        edges: &'a std::collections::BTreeMap<Vec<String>, std::collections::BTreeMap<Vec<String>, String>>,
        mark: &mut std::collections::BTreeMap<&'a Vec<String>, Mark>,
        stack: &mut Vec<(&'a Vec<String>, &'a str)>,
    ) -> Option<String> {
        mark.insert(v, Mark::Open);
        for (w, at) in edges.get(v).into_iter().flatten() {
            stack.push((v, at));
            match mark.get(w).copied() {
                Some(Mark::Open) => {
                    let from = stack.iter().position(|(u, _)| *u == w).unwrap_or(0);
                    let cycle: Vec<String> =
                        stack[from..].iter().map(|(u, at)| format!("{} ({at})", u.join("::"))).collect();
                    return Some(format!("{} -> {}", cycle.join(" -> "), w.join("::")));
                }
                Some(Mark::New) => {
                    if let Some(c) = visit(w, edges, mark, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
            stack.pop();
        }
        mark.insert(v, Mark::Done);
        None
    }
    for v in &known {
        if mark[v] == Mark::New
            && let Some(cycle) = visit(v, &edges, &mut mark, &mut Vec::new())
        {
            panic!("a cycle of files: {cycle}");
        }
    }
}

/// No module reaches its parent's names by a glob (`use super::*` outside test modules): each
/// file says what it uses, so the edges above are all there is.
#[test]
fn no_file_imports_its_parent_whole() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let src = &src;
    let globs: Vec<String> = modules(src)
        .iter()
        .flat_map(|(_, file, code)| {
            code.iter()
                .filter(|(_, c)| c.starts_with("use super::*"))
                .map(move |(l, _)| format!("{}:{l}", file.strip_prefix(src).unwrap().display()))
        })
        .collect();
    assert!(globs.is_empty(), "glob imports of a parent: {globs:?}");
}
