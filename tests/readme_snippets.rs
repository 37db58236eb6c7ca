//! Every Rust snippet of the README (and of the guide to your own model) is code that compiles: each of its lines is a line of one of
//! the examples (`examples/*.rs`, which `cargo test` builds), so a snippet that drifts from the
//! API fails here or in the examples' build.

use std::path::Path;

/// The README's ```rust blocks, each as its non-empty lines, trimmed.
fn snippets(readme: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in readme.lines() {
        match (&mut current, line.trim()) {
            (None, "```rust") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), code) if !code.is_empty() => block.push(code.to_string()),
            _ => {}
        }
    }
    blocks
}

#[test]
fn every_readme_snippet_is_code_of_an_example() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The front page and the guide to your own model, whose snippets the front page used to hold.
    let readme = ["README.md", "docs/custom-models.md"]
        .iter()
        .map(|f| std::fs::read_to_string(root.join(f)).unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let mut examples = Vec::new();
    for entry in std::fs::read_dir(root.join("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            examples.push((path, text.lines().map(|l| l.trim().to_string()).collect::<Vec<_>>()));
        }
    }
    let blocks = snippets(&readme);
    assert!(blocks.len() >= 3, "the README's Rust snippets were not found: {}", blocks.len());
    for block in &blocks {
        let home = examples.iter().find(|(_, lines)| block.iter().all(|l| lines.contains(l)));
        assert!(
            home.is_some(),
            "this README snippet is not, line for line, code of one example (examples/*.rs):\n{}",
            block.join("\n")
        );
    }
}
