//! Reading a config: TOML text or a file, old field names renamed, `--set`/`--unset`
//! overrides applied, and every error named by its dotted field and line with the nearest valid
//! name.

use std::path::Path;

use super::TrainConfig;
use crate::arch::LayerSpec;
use crate::error::{Error, Result};

/// Fields renamed since configs were first written: (section, old name, new name). Old names
/// are still read — in files and in overrides — and written under the new name.
pub const RENAMED: &[(&str, &str, &str)] = &[("privacy", "steps", "worst_case_steps")];

/// Renames old field names in `table` to their new ones, refusing a table that has both.
fn canonical(table: &mut toml::Table) -> Result<()> {
    for (section, old, new) in RENAMED {
        let Some(s) = table.get_mut(*section).and_then(toml::Value::as_table_mut) else { continue };
        if let Some(v) = s.remove(*old) {
            if s.contains_key(*new) {
                return Err(Error::config(
                    format!("{section}.{old}"),
                    format!("renamed to {section}.{new}; give only the new name"),
                ));
            }
            s.insert(new.to_string(), v);
        }
    }
    Ok(())
}

/// The current name of a dotted field that may use an old name.
fn canonical_key(key: &str) -> String {
    RENAMED
        .iter()
        .find(|(section, old, _)| key == format!("{section}.{old}"))
        .map_or_else(|| key.to_string(), |(section, _, new)| format!("{section}.{new}"))
}

/// One change to a config made outside its file: on the command line or by a sweep.
#[derive(Debug, Clone, PartialEq)]
pub enum Override {
    /// Set a dotted field (`privacy.epsilon`) to a TOML value.
    Set(String, toml::Value),
    /// Remove a dotted field, so its default applies (e.g. `privacy.epsilon` to give `sigma`).
    Unset(String),
}

impl Override {
    /// Parses `key=value`: the value as TOML (`0.5`, `"plain"`, `[1, 2]`), or else as a string.
    ///
    /// # Errors
    /// Text without `=` or with an empty key.
    pub fn parse_set(text: &str) -> Result<Self> {
        let (key, raw) = text
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| Error::config("--set", format!("`{text}`: write KEY=VALUE, e.g. privacy.epsilon=0.5")))?;
        let value = format!("v = {raw}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(raw.trim().to_string()));
        Ok(Override::Set(key.trim().to_string(), value))
    }

    /// The dotted field it changes.
    #[must_use]
    pub fn key(&self) -> &str {
        match self {
            Override::Set(k, _) | Override::Unset(k) => k,
        }
    }
}

impl TrainConfig {
    /// Reads a TOML file and applies `overrides`.
    ///
    /// # Errors
    /// The file cannot be read, is not TOML, or has an unknown, missing or mistyped field
    /// (named, with the file).
    pub fn from_file(path: &Path, overrides: &[Override]) -> Result<Self> {
        Self::from_file_set(path, overrides, COMMAND_LINE)
    }

    /// As [`from_file`](Self::from_file), the `overrides` coming from `origin` (where an error
    /// says a key was set: `on the command line`, `in sweep.toml`).
    ///
    /// # Errors
    /// As [`from_file`](Self::from_file).
    pub fn from_file_set(path: &Path, overrides: &[Override], origin: &str) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
        let set_elsewhere = set_at(origin);
        Self::from_toml_set(&text, overrides, origin).map_err(|e| match e {
            // A key set by an override is not in the file: the file is not named for it.
            Error::Config { field, message } if !field.ends_with(&set_elsewhere) => {
                Error::Config { field, message: format!("{message} (in {})", path.display()) }
            }
            other => other,
        })
    }

    /// Parses TOML text and applies `overrides`.
    ///
    /// # Errors
    /// As [`from_file`](Self::from_file): errors name the offending key by its dotted path,
    /// with its line in `text` when it is there, and suggest the nearest valid name for a
    /// misspelt one.
    pub fn from_toml(text: &str, overrides: &[Override]) -> Result<Self> {
        Self::from_toml_set(text, overrides, COMMAND_LINE)
    }

    /// As [`from_toml`](Self::from_toml), the `overrides` coming from `origin`.
    fn from_toml_set(text: &str, overrides: &[Override], origin: &str) -> Result<Self> {
        let mut table: toml::Table =
            text.parse().map_err(|e: toml::de::Error| Error::config("(file)", e.to_string()))?;
        let renamed = RENAMED.iter().any(|(s, old, _)| table.get(*s).and_then(|t| t.get(*old)).is_some());
        canonical(&mut table)?;
        // The noise is given by exactly one of ε and σ: setting one from outside the file
        // replaces the file's other one.
        for (set, other) in [("privacy.sigma", "epsilon"), ("privacy.epsilon", "sigma")] {
            let sets =
                |key: &str| overrides.iter().any(|o| matches!(o, Override::Set(k, _) if canonical_key(k) == key));
            if sets(set)
                && !sets(&format!("privacy.{other}"))
                && let Some(p) = table.get_mut("privacy").and_then(toml::Value::as_table_mut)
            {
                p.remove(other);
            }
        }
        for o in overrides {
            apply(&mut table, o)?;
        }
        if let Some(layers) = table.get("model").and_then(|m| m.get("layers")).and_then(|l| l.as_array()) {
            check_layer_kinds(layers)?;
        }
        let own;
        let parsed = if overrides.is_empty() && !renamed {
            text
        } else {
            own = toml::to_string(&table).map_err(|e| Error::config("(file)", e.to_string()))?;
            &own
        };
        let de = toml::Deserializer::parse(parsed).map_err(|e| Error::config("(file)", e.to_string()))?;
        let mut config: TrainConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            config_error(text, (overrides, origin), &path, inner.message())
        })?;
        // Defaults that depend on other fields are written out, so that a run's recorded config
        // says what it did.
        config.stopping.rule = Some(config.stop_rule());
        let conversion_given = table.get("privacy").and_then(|p| p.get("conversion")).is_some();
        if let (Some(default), false) = (config.privacy.method.training().default_conversion(), conversion_given) {
            config.privacy.conversion = default;
        }
        Ok(config)
    }
}

/// Where overrides come from unless a caller says otherwise ([`TrainConfig::from_file_set`]).
const COMMAND_LINE: &str = "on the command line";

/// How an error places a key that an override from `origin` set.
fn set_at(origin: &str) -> String {
    format!(" (set {origin})")
}

/// A deserialisation error as a config error: the full dotted key (the unknown field itself for
/// an unknown field), its line in `text` or where the override that set it came from
/// (`origin`), and a suggestion.
fn config_error(text: &str, (overrides, origin): (&[Override], &str), path: &str, message: &str) -> Error {
    let unknown = message.strip_prefix("unknown field `").and_then(|m| m.split('`').next());
    let parent = path.trim_end_matches('.');
    let key = match unknown {
        Some(u) if !parent.is_empty() && parent != "." && !parent.ends_with(u) => format!("{parent}.{u}"),
        Some(u) if parent.is_empty() || parent == "." => u.to_string(),
        _ => parent.to_string(),
    };
    let key = if key.is_empty() { "(file)".to_string() } else { key };
    let mut message = message.to_string();
    if let Some(u) = unknown {
        let expected: Vec<&str> = message.split('`').skip(3).step_by(2).collect();
        if let Some(best) = expected.iter().min_by_key(|e| edit_distance(u, e)).filter(|e| edit_distance(u, e) <= 2) {
            message = format!("unknown field `{u}`: did you mean `{best}`? (expected one of {})", expected.join(", "));
        }
    }
    let missing = message.strip_prefix("missing field `").and_then(|m| m.split('`').next()).map(str::to_string);
    let key = match missing {
        Some(m) if key != "(file)" => format!("{key}.{m}"),
        Some(m) => m,
        None => key,
    };
    // An override is to blame when it set this key (by its old name too) or a key under it (a
    // misspelt section: `privcy.epsilon` gives an unknown field `privcy`).
    let set_here = |o: &Override| {
        let k = canonical_key(o.key().trim());
        k == key || k.starts_with(&format!("{key}."))
    };
    let place = if overrides.iter().any(set_here) {
        set_at(origin)
    } else {
        line_of(text, &key).map_or(String::new(), |l| format!(" (line {l})"))
    };
    Error::config(format!("{key}{place}"), message)
}

/// The 1-based line of dotted `key` in TOML `text`: `name = …` under the `[section]` of its
/// prefix (or the whole dotted key at the top level).
fn line_of(text: &str, key: &str) -> Option<usize> {
    let (section, name) = key.rsplit_once('.').unwrap_or(("", key));
    let name = name.split('[').next().unwrap_or(name);
    let mut current = String::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(h) = t.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            current = h.trim().to_string();
            continue;
        }
        let Some((k, _)) = t.split_once('=') else { continue };
        let k = k.trim().trim_matches('"');
        if (current == section && k == name) || (current.is_empty() && k == key) {
            return Some(i + 1);
        }
    }
    // A missing field: point at its section's header.
    text.lines().position(|l| l.trim() == format!("[{section}]")).map(|i| i + 1)
}

/// Levenshtein distance, for "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Rejects layer kinds that have parameters but no per-example rule, naming the layer.
fn check_layer_kinds(layers: &[toml::Value]) -> Result<()> {
    for (i, l) in layers.iter().enumerate() {
        let kind = l.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        if let Some((_, why)) = PARAMETERISED_WITHOUT_RULE.iter().find(|(k, _)| *k == kind) {
            return Err(Error::config(
                format!("model.layers[{i}]"),
                format!(
                    "layer `{kind}` has trainable parameters but no per-example gradient rule ({why}); \
                     supported layers: {}",
                    LayerSpec::KINDS.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Layers that hold trainable parameters but have no exact per-example rule: a model that uses
/// one is rejected before training rather than trained with wrong per-example gradients.
const PARAMETERISED_WITHOUT_RULE: &[(&str, &str)] = &[
    ("batch_norm", "batch statistics mix examples, so per-example gradients are undefined; use group_norm"),
    ("embedding", "not in the config's layer list yet: write the model in burn with dpgd::nn::Embedding"),
    ("lstm", "recurrent layers have no per-example rule here yet"),
    ("gru", "recurrent layers have no per-example rule here yet"),
    ("conv1d", "it has no per-example rule here yet; use conv2d with a height-1 input"),
    ("multi_head_attention", "it has no per-example rule here yet"),
];

#[cfg(test)]
#[test]
fn refused_kinds_are_not_kinds() {
    // A kind added to `arch::kinds` must leave this list, or configs would refuse it.
    for (kind, _) in PARAMETERISED_WITHOUT_RULE {
        assert!(!LayerSpec::KINDS.contains(kind), "{kind} is a layer kind now: remove it from the refusals");
    }
}

/// Applies one override to a TOML table.
fn apply(root: &mut toml::Table, o: &Override) -> Result<()> {
    let key = &canonical_key(o.key().trim());
    let parts: Vec<&str> = key.split('.').map(str::trim).collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(Error::config("--set", format!("`{key}` is not a dotted field name like privacy.epsilon")));
    }
    let (last, path) = parts.split_last().ok_or_else(|| Error::config("--set", "empty field name"))?;
    let mut table = root;
    for part in path {
        table = table
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| Error::config(key.as_str(), "cannot set a field inside a non-table value"))?;
    }
    match o {
        Override::Set(_, value) => {
            table.insert(last.to_string(), value.clone());
        }
        Override::Unset(_) => {
            table.remove(*last);
        }
    }
    Ok(())
}
