//! The module graph as `docs/ARCHITECTURE.md` draws it, held against the
//! code: every `crate::` path in production code (and every `vramd::` path
//! in `main.rs`) names a module its row of the module table allows, every
//! module has a row, and the allowed edges have no cycle, so no module
//! imports one above it. Test code (`#[cfg(test)]` items and the
//! `*tests*.rs` files) may reach further, e.g. into `app` for the settings
//! a test daemon uses, and is not checked.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Module name → the modules its row says it may depend on.
type Allowed = BTreeMap<String, BTreeSet<String>>;

/// The module table of `docs/ARCHITECTURE.md`: rows `| \`module\` | owns |
/// may depend on |`. The last cell is "everything", "—", or backticked
/// paths whose first segment is a module (`analysis::snapshot` counts as
/// `analysis`; the words in brackets are prose).
fn documented_graph() -> Allowed {
    let text = read(&Path::new(ROOT).join("docs/ARCHITECTURE.md"));
    let modules = top_level_modules();
    let mut allowed = Allowed::new();
    let mut everything = Vec::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // "| a | b | c |" splits into ["", a, b, c, ""].
        if cells.len() != 5 || !cells[1].starts_with('`') {
            continue;
        }
        let module = cells[1].trim_matches('`').to_owned();
        if module != "main" && !modules.contains(&module) {
            continue;
        }
        let deps = cells[3];
        if deps == "everything" {
            everything.push(module.clone());
            allowed.insert(module, modules.clone());
            continue;
        }
        let named = backticked(deps)
            .filter_map(|path| path.split("::").next())
            .filter(|name| modules.contains(*name))
            .map(str::to_owned)
            .collect();
        allowed.insert(module, named);
    }
    for module in everything {
        if let Some(deps) = allowed.get_mut(&module) {
            deps.remove(&module);
        }
    }
    allowed
}

fn backticked(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// The `pub mod` lines of `src/lib.rs`.
fn top_level_modules() -> BTreeSet<String> {
    read(&Path::new(ROOT).join("src/lib.rs"))
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub mod "))
        .map(|rest| rest.trim_end_matches(';').to_owned())
        .collect()
}

fn read(path: &Path) -> String {
    match fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => panic!("cannot read {}: {error}", path.display()),
    }
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => panic!("cannot list {}: {error}", dir.display()),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// A whole file of tests: `tests.rs`, `*_tests.rs`, `tests_*.rs`, or
/// anything under a `tests/` directory.
fn is_test_file(relative: &Path) -> bool {
    let name = relative.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    name == "tests"
        || name.ends_with("_tests")
        || name.starts_with("tests_")
        || relative.components().any(|c| c.as_os_str() == "tests")
}

/// The source with comments, string and character literals blanked (so a
/// brace or a path inside them counts for nothing) and every
/// `#[cfg(test)]` item removed.
fn production_code(source: &str) -> String {
    strip_test_items(&blank_literals(source))
}

fn blank_literals(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        let rest = &chars[i..];
        if rest.starts_with(&['/', '/']) {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if rest.starts_with(&['/', '*']) {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i..].starts_with(&['/', '*']) {
                    depth += 1;
                    i += 2;
                } else if chars[i..].starts_with(&['*', '/']) {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if let Some(end) = raw_string_end(&chars, i) {
            out.push_str("\"\"");
            i = end;
        } else if chars[i] == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i += 1;
        } else if let Some(end) = char_literal_end(&chars, i) {
            out.push_str("' '");
            i = end;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// `r"…"`, `r#"…"#`, `br"…"`: the index after the literal.
fn raw_string_end(chars: &[char], start: usize) -> Option<usize> {
    let boundary = start == 0 || !(chars[start - 1].is_alphanumeric() || chars[start - 1] == '_');
    let mut i = start;
    if chars.get(i) == Some(&'b') {
        i += 1;
    }
    if !boundary || chars.get(i) != Some(&'r') {
        return None;
    }
    i += 1;
    let hashes = chars[i..].iter().take_while(|&&c| c == '#').count();
    i += hashes;
    if chars.get(i) != Some(&'"') {
        return None;
    }
    i += 1;
    while i < chars.len() {
        if chars[i] == '"'
            && chars[i + 1..].iter().take(hashes).filter(|&&c| c == '#').count() == hashes
        {
            return Some(i + 1 + hashes);
        }
        i += 1;
    }
    Some(chars.len())
}

/// `'x'` or `'\n'` (not a lifetime `'a`): the index after the literal.
fn char_literal_end(chars: &[char], start: usize) -> Option<usize> {
    if chars[start] != '\'' {
        return None;
    }
    match chars.get(start + 1) {
        Some('\\') => {
            let close = chars[start + 2..].iter().position(|&c| c == '\'')?;
            Some(start + 2 + close + 1)
        }
        Some(_) if chars.get(start + 2) == Some(&'\'') => Some(start + 3),
        _ => None,
    }
}

fn strip_test_items(code: &str) -> String {
    let lines: Vec<&str> = code.lines().collect();
    let mut kept = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "#[cfg(test)]" {
            kept.push(lines[i]);
            i += 1;
            continue;
        }
        // The item after the attribute (and any attributes that follow it)
        // ends at `;` before any brace, or where its braces close.
        i += 1;
        let mut depth = 0i64;
        let mut opened = false;
        while i < lines.len() {
            let line = lines[i];
            i += 1;
            if !opened && line.trim_start().starts_with("#[") {
                continue;
            }
            for c in line.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if (opened && depth <= 0) || (!opened && line.trim_end().ends_with(';')) {
                break;
            }
        }
    }
    kept.join("\n")
}

/// The modules a piece of code names through `prefix` (`crate::` or
/// `vramd::`), including those inside a `crate::{a, b::c}` group.
fn named_modules(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            for item in inner.split(',') {
                let first = item.trim().split("::").next().unwrap_or("");
                named.insert(first.trim().to_owned());
            }
        } else {
            let first: String =
                rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            named.insert(first);
        }
    }
    named.retain(|name| !name.is_empty() && name != "self");
    named
}

#[test]
fn every_module_imports_only_what_its_row_of_the_module_table_allows() {
    let allowed = documented_graph();
    let modules = top_level_modules();
    let missing: Vec<_> = modules.iter().filter(|m| !allowed.contains_key(*m)).collect();
    assert!(
        missing.is_empty(),
        "modules with no row in docs/ARCHITECTURE.md's module table: {missing:?}"
    );

    let src = Path::new(ROOT).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut breaches = Vec::new();
    let mut checked = 0;
    for path in &files {
        let relative = path.strip_prefix(&src).unwrap_or(path);
        let first = relative.components().next().and_then(|c| c.as_os_str().to_str()).unwrap_or("");
        let module = first.trim_end_matches(".rs");
        let prefix = match module {
            "lib" => continue,
            "main" => "vramd::",
            _ => "crate::",
        };
        if is_test_file(relative) {
            continue;
        }
        checked += 1;
        let Some(may) = allowed.get(module) else {
            breaches.push(format!("src/{}: module `{module}` has no row", relative.display()));
            continue;
        };
        for name in named_modules(&production_code(&read(path)), prefix) {
            if name != module && modules.contains(&name) && !may.contains(&name) {
                breaches.push(format!(
                    "src/{} names `{name}`, but `{module}` may depend only on {may:?}",
                    relative.display()
                ));
            }
        }
    }
    assert!(checked > 50, "only {checked} production files found under src/");
    assert!(
        breaches.is_empty(),
        "imports the module table of docs/ARCHITECTURE.md does not allow \
         (change the code, or the table if the design changed):\n{}",
        breaches.join("\n")
    );
}

#[test]
fn the_documented_module_graph_has_no_cycle() {
    let allowed = documented_graph();
    // Kahn's algorithm: peel modules that depend on nothing left.
    let mut remaining: BTreeMap<&str, BTreeSet<&str>> = allowed
        .iter()
        .map(|(module, deps)| (module.as_str(), deps.iter().map(String::as_str).collect()))
        .collect();
    let mut order = Vec::new();
    while let Some(free) = remaining.iter().find(|(_, deps)| deps.is_empty()).map(|(m, _)| *m) {
        remaining.remove(free);
        for deps in remaining.values_mut() {
            deps.remove(free);
        }
        order.push(free);
    }
    assert!(
        remaining.is_empty(),
        "docs/ARCHITECTURE.md's module table has a cycle among {:?} (layered so far: {order:?})",
        remaining.keys().collect::<Vec<_>>()
    );
}

#[test]
fn test_code_and_literals_are_not_read_as_imports() {
    let source = r##"
use crate::model::Timestamp;
const TEXT: &str = "crate::app is only words";
let brace = '{';
// crate::server in a comment
#[cfg(test)]
mod tests {
    use crate::app::analysis_settings;
    fn f() { let s = r#"}"#; }
}
#[cfg(test)]
use crate::play::Schedule;
fn after() -> crate::clock::Now { todo() }
"##;
    let named = named_modules(&production_code(source), "crate::");
    let expected: BTreeSet<String> = ["model", "clock"].into_iter().map(str::to_owned).collect();
    assert_eq!(named, expected);
    let grouped = named_modules("use crate::{history::Ring, model};", "crate::");
    assert_eq!(grouped, ["history", "model"].into_iter().map(str::to_owned).collect());
}
