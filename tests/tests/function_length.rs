//! No product function runs past a page: a function over `MAX_LINES`
//! lines hides several steps behind one name, and a reader has to hold
//! them all at once. The benchmark binaries, tests and the test support
//! crate are exempt. A function knowingly left long goes in `STILL_LONG`
//! with its length (empty today), a list that only shrinks: a listed
//! function that grows, or a new one over the line, fails here.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::path::{Path, PathBuf};

use swarm_tests::docker::repo_root;

const MAX_LINES: usize = 100;

/// Product crates: the workspace but the test support and fuzz targets.
const PRODUCT: &[&str] = &[
    "core",
    "proto",
    "view",
    "mcp",
    "git",
    "forge",
    "telemetry",
    "auth",
    "store",
    "controller",
    "sidecar",
    "cli",
];

/// Functions left over the line, as `path::name` and the most lines each
/// may have. Each is due to be split; none may grow.
const STILL_LONG: &[(&str, usize)] = &[];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" && name != "swarm-bench" {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(path);
        }
    }
}

/// `source` with comments, string and character literals blanked (newlines
/// kept), so braces and `fn` inside them count for nothing.
fn code_only(source: &str) -> String {
    let b = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let blank = |out: &mut String, text: &str| {
        out.extend(text.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &source[i..];
        let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let end = if rest.starts_with("//") {
            rest.find('\n').unwrap_or(rest.len())
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            let mut j = 0;
            while j < rest.len() {
                if rest[j..].starts_with("/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with("*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += rest[j..].chars().next().map_or(1, char::len_utf8);
                }
            }
            j
        } else if let Some(len) = raw_string(rest).filter(|_| !ident_before) {
            len
        } else if rest.starts_with('"') {
            let mut j = 1;
            while j < rest.len() && rest.as_bytes()[j] != b'"' {
                j += if rest.as_bytes()[j] == b'\\' { 2 } else { 1 };
            }
            (j + 1).min(rest.len())
        } else if let Some(len) = char_literal(rest) {
            len
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
            continue;
        };
        // Literals hold whole characters; `end` never splits one.
        let end = (0..=end).rev().find(|e| rest.is_char_boundary(*e)).unwrap_or(0).max(1);
        blank(&mut out, &rest[..end]);
        i += end;
    }
    out
}

/// The length of a raw string literal (`r"…"`, `br#"…"#`) at the start.
fn raw_string(rest: &str) -> Option<usize> {
    let after_b = rest.strip_prefix('b').unwrap_or(rest);
    let after_r = after_b.strip_prefix('r')?;
    let hashes = after_r.len() - after_r.trim_start_matches('#').len();
    let body = after_r[hashes..].strip_prefix('"')?;
    let close = format!("\"{}", "#".repeat(hashes));
    let end = body.find(&close)? + close.len();
    Some(rest.len() - body.len() + end)
}

/// The length of a character literal at the start (not a lifetime).
fn char_literal(rest: &str) -> Option<usize> {
    let body = rest.strip_prefix('\'')?;
    let len = if let Some(escaped) = body.strip_prefix('\\') {
        let close = escaped.find('\'')?;
        (close <= 10).then_some(close + 2)?
    } else {
        body.chars().next()?.len_utf8()
    };
    (body[len..].starts_with('\'')).then_some(len + 2)
}

/// The name of the function a line declares, if it does.
fn declared_fn(line: &str) -> Option<&str> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "fn")?;
    let before_ok = words[..at].iter().all(|w| {
        w.starts_with("pub") || ["const", "async", "unsafe", "extern", "\"C\"", "default"].contains(w)
    });
    let name = words.get(at + 1)?;
    let name = &name[..name.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(name.len())];
    (before_ok && !name.is_empty()).then_some(name)
}

/// Every function of `source` with its length in lines (signature to
/// closing brace), test modules left out.
fn functions(source: &str) -> Vec<(String, usize)> {
    let code = code_only(source);
    let mut lines: Vec<&str> = code.lines().collect();
    if let Some(at) = lines
        .windows(2)
        .position(|w| w[0].trim_start().starts_with("#[cfg(test)]") && w[1].trim_start().starts_with("mod "))
    {
        lines.truncate(at);
    }
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = declared_fn(line) else { continue };
        let mut depth = 0i64;
        let mut opened = false;
        'scan: for (offset, l) in lines[start..].iter().enumerate() {
            for c in l.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    // A declaration without a body (a trait's).
                    ';' if !opened => break 'scan,
                    _ => {}
                }
                if opened && depth == 0 {
                    found.push((name.to_string(), offset + 1));
                    break 'scan;
                }
            }
        }
    }
    found
}

#[test]
fn no_product_function_is_over_the_line_or_longer_than_it_was() {
    let root = repo_root();
    let mut files = Vec::new();
    for member in PRODUCT {
        sources(&root.join(member).join("src"), &mut files);
    }
    assert!(files.len() > 100, "the product's sources were found: {}", files.len());
    let mut over = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
        let source = std::fs::read_to_string(file).unwrap();
        for (name, len) in functions(&source) {
            let id = format!("{rel}::{name}");
            let allowed = STILL_LONG.iter().find(|(f, _)| *f == id).map_or(MAX_LINES, |(_, n)| *n);
            if len > allowed {
                over.push(format!("{id}: {len} lines (at most {allowed})"));
            }
        }
    }
    assert!(
        over.is_empty(),
        "functions over {MAX_LINES} lines, or longer than they were; split them into named steps:\n  {}",
        over.join("\n  ")
    );
}

#[test]
fn the_scan_sees_through_literals_and_comments() {
    let source = r##"
pub(crate) async fn outer(x: &str) -> String {
    let brace = '{';
    let s = "}}} fn fake() {";
    let r = r#"{"#;
    // }
    /* { */
    let life: &'static str = "a";
    format!("{brace}{s}{r}{life}{x}")
}

trait T {
    fn declared(&self);
}

fn inner() {}

#[cfg(test)]
mod tests {
    fn very_long() {}
}
"##;
    assert_eq!(functions(source), [("outer".to_string(), 9), ("inner".to_string(), 1)]);
}

#[test]
fn every_listed_long_function_still_exists() {
    let root = repo_root();
    for (id, _) in STILL_LONG {
        let (path, name) = id.split_once("::").unwrap();
        let source = std::fs::read_to_string(root.join(path)).unwrap_or_default();
        assert!(
            functions(&source).iter().any(|(n, len)| n == name && *len > MAX_LINES),
            "{id} is no longer over {MAX_LINES} lines (or gone): take it off STILL_LONG"
        );
    }
}
