//! The key catalogue: every dotted key a [`Document`] declares, with its
//! summary (the field's doc comment, through `schemars`, or the summary
//! the declaration gives), form and range, in rendering order; environment
//! naming; and the "did you mean" suggestion for unknown keys.

use serde_json::Value;

use super::Document;
use crate::setting::{Declared, Keys};

/// Prefix of the environment variables that configure vramd.
pub const ENV_PREFIX: &str = "VRAMD_";
/// Separator between the levels of a key in an environment variable name.
pub const ENV_SEPARATOR: &str = "__";

/// One configuration key, as its section declared it, with its summary.
pub type KeySpec = Declared;

/// The catalogue of `D`: its declarations over its defaults, each with the
/// summary its field's doc comment gives unless the declaration gives one.
pub fn catalogue<D: Document>() -> Vec<KeySpec> {
    let schema = schemars::schema_for!(D);
    let schema = schema.as_value();
    let mut keys = Keys::default();
    D::default().check(&mut keys);
    let mut declared = keys.declared();
    for key in &mut declared {
        if key.summary.is_empty() {
            key.summary = description(schema, &key.key).unwrap_or_default().replace('\n', " ");
        }
    }
    declared
}

/// The description of the property at the dotted `key` of a JSON schema,
/// following `$ref`s and flattened (`allOf`) parts.
fn description(root: &Value, key: &str) -> Option<String> {
    let mut node = root;
    for name in key.split('.') {
        node = property(root, node, name)?;
    }
    node.get("description")?.as_str().map(str::to_owned)
}

fn property<'a>(root: &'a Value, node: &'a Value, name: &str) -> Option<&'a Value> {
    let node = resolve(root, node);
    if let Some(found) = node.get("properties").and_then(|properties| properties.get(name)) {
        return Some(found);
    }
    let parts = node.get("allOf").and_then(Value::as_array)?;
    parts.iter().find_map(|part| property(root, part, name))
}

fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str).and_then(|path| path.strip_prefix("#/")) {
        Some(path) => path.split('/').fold(root, |node, name| &node[name]),
        None => node,
    }
}

/// The environment variable that sets `key`: `server.listen` →
/// `VRAMD_SERVER__LISTEN`.
pub fn env_var_for(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_uppercase().replace('.', ENV_SEPARATOR))
}

/// Every table a key can be written in, in rendering order.
pub(super) fn tables(keys: &[KeySpec]) -> Vec<&str> {
    let mut tables: Vec<&str> = Vec::new();
    for spec in keys {
        for (end, _) in spec.key.match_indices('.') {
            let table = &spec.key[..end];
            if !tables.contains(&table) {
                tables.push(table);
            }
        }
    }
    tables
}

/// Longest unknown name a suggestion is looked for (the longest key is
/// under 60 bytes): the edit distance is quadratic.
const MAX_SUGGESTABLE: usize = 256;

/// The known key or table closest to an unknown one, when close enough
/// to be a likely typo.
pub(super) fn suggest(keys: &[KeySpec], unknown: &str) -> Option<String> {
    if unknown.len() > MAX_SUGGESTABLE {
        return None;
    }
    let candidates = keys.iter().map(|spec| spec.key.as_str()).chain(tables(keys));
    candidates
        .map(|known| (edit_distance(unknown, known), known))
        .filter(|(distance, known)| *distance <= 3.max(known.len() / 5))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, known)| known.to_owned())
}

/// Levenshtein distance, counting `.` and `_` as the same character so that
/// `VRAMD_SAMPLER_FAST_INTERVAL` (one underscore) suggests the right key.
fn edit_distance(a: &str, b: &str) -> usize {
    let normal = |c: char| if c == '.' { '_' } else { c };
    let a: Vec<char> = a.chars().map(normal).collect();
    let b: Vec<char> = b.chars().map(normal).collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current.push(substitution.min(current[j] + 1).min(previous[j + 1] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}
