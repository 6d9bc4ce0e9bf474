//! The tree kept honest: every source file of every crate is named in
//! ARCHITECTURE.md's code map, so a reader finds where any behaviour
//! lives from there in one hop, and a new file arrives with its line.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::path::{Path, PathBuf};

use swarm_tests::docker::repo_root;

/// The workspace's members, from the root manifest's `members = [...]`.
fn members(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let line = manifest.lines().find(|l| l.trim_start().starts_with("members")).unwrap();
    line.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

/// Source files that carry behaviour: not crate roots, and not tests.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                sources(&path, out);
            }
        } else if name.ends_with(".rs")
            && !["lib.rs", "main.rs", "tests.rs"].contains(&name.as_str())
            && !name.ends_with("_tests.rs")
        {
            out.push(path);
        }
    }
}

/// The words of the document's code spans (`...`), split where a path
/// cannot go on.
fn code_words(doc: &str) -> Vec<String> {
    doc.split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|span| {
            span.split(|c: char| !(c.is_alphanumeric() || "/._-".contains(c)))
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Whether `file` (a module file, or a `mod.rs` standing for its directory)
/// is named by one of `words`: by its name, its file name, or a path
/// ending in either.
fn named(file: &Path, words: &[String]) -> bool {
    let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
    if stem == "mod" {
        let dir = file.parent().unwrap().file_name().unwrap().to_string_lossy().into_owned();
        let as_dir = format!("{dir}/");
        return words
            .iter()
            .any(|w| w == &dir || w.starts_with(&as_dir) || w.ends_with(&format!("/{as_dir}")));
    }
    let file_name = format!("{stem}.rs");
    words.iter().any(|w| w == &stem || w == &file_name || w.ends_with(&format!("/{file_name}")))
}

#[test]
fn every_source_file_is_named_in_the_architecture_code_map() {
    let root = repo_root();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let words = code_words(&doc);
    let mut files = Vec::new();
    for member in members(&root) {
        sources(&root.join(&member).join("src"), &mut files);
    }
    assert!(files.len() > 100, "found only {} source files under the members' src/", files.len());
    let missing: Vec<String> = files
        .iter()
        .filter(|f| !named(f, &words))
        .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map does not name these files; add a line for each where its crate is described:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn a_file_the_document_does_not_name_is_found() {
    let words = code_words("the `scheduler/` and `model/types.rs`, and `views.rs` (reads)");
    assert!(named(Path::new("c/src/scheduler/mod.rs"), &words));
    assert!(named(Path::new("c/src/scheduler/model/types.rs"), &words));
    assert!(named(Path::new("c/src/scheduler/views.rs"), &words));
    assert!(!named(Path::new("c/src/scheduler/reads.rs"), &words), "prose outside code spans does not count");
    assert!(!named(Path::new("c/src/stall.rs"), &words));
}

/// The scheduler's components: each works on the core (`scheduler/core.rs`)
/// and the model, and none imports another; what one must hear of another
/// goes through the dispatcher (`mod.rs` and the files of its `impl
/// Scheduler`), which may use them all.
const SCHEDULER_COMPONENTS: &[&str] =
    &["budget", "limits", "merge_queue", "pause", "retention", "review", "sessions", "stall", "subswarm"];

/// The other components that `source`, component `own`'s code, names
/// through `super::` or `crate::scheduler::`.
fn components_named(own: &str, source: &str) -> Vec<String> {
    let mut names = Vec::new();
    for prefix in ["super::", "scheduler::"] {
        for (at, _) in source.match_indices(prefix) {
            let rest = &source[at + prefix.len()..];
            let listed = match rest.strip_prefix('{') {
                Some(group) => &group[..group.find('}').unwrap_or(group.len())],
                None => rest,
            };
            let words = if rest.starts_with('{') {
                listed.split(',').map(str::trim).collect::<Vec<_>>()
            } else {
                vec![listed]
            };
            for w in words {
                let name: String = w.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if name != own && SCHEDULER_COMPONENTS.contains(&name.as_str()) && !names.contains(&name) {
                    names.push(name);
                }
            }
        }
    }
    names
}

#[test]
fn a_scheduler_component_imports_no_other_component() {
    let dir = repo_root().join("controller/src/scheduler");
    let mut crossings = Vec::new();
    for own in SCHEDULER_COMPONENTS {
        let file =
            [dir.join(format!("{own}.rs")), dir.join(own).join("mod.rs")].into_iter().find(|f| f.exists());
        let file =
            file.unwrap_or_else(|| panic!("component {own} has no file under controller/src/scheduler/"));
        let source = std::fs::read_to_string(&file).unwrap();
        for other in components_named(own, &source) {
            crossings.push(format!("{own} -> {other}"));
        }
    }
    assert!(
        crossings.is_empty(),
        "a scheduler component names another; return what the other must hear of, or note it in `Effects`, \
         and let the dispatcher route it:\n  {}",
        crossings.join("\n  ")
    );
}

/// Whether `source`'s code (its test module aside, comments skipped)
/// names the `Scheduler` type.
fn names_the_dispatcher(source: &str) -> bool {
    let code = source.split("\n#[cfg(test)]\nmod tests").next().unwrap_or(source);
    let word = |c: char| c.is_alphanumeric() || c == '_';
    code.lines().filter(|l| !l.trim_start().starts_with("//")).any(|line| {
        line.match_indices("Scheduler").any(|(at, name)| {
            let before = line[..at].chars().next_back();
            let after = line[at + name.len()..].chars().next();
            !before.is_some_and(word) && !after.is_some_and(word)
        })
    })
}

/// The dispatcher is `scheduler/mod.rs` alone: every handler and
/// component below it is a function over the core and the components, so
/// a reader (or a structure drawing) can follow a command past the
/// dispatcher's `match` without walking back up into it.
#[test]
fn no_file_below_the_dispatcher_names_it() {
    let dir = repo_root().join("controller/src/scheduler");
    let mut files = Vec::new();
    sources(&dir, &mut files);
    let mut naming: Vec<String> = files
        .iter()
        .filter(|path| **path != dir.join("mod.rs"))
        .filter(|path| names_the_dispatcher(&std::fs::read_to_string(path).unwrap()))
        .map(|path| path.strip_prefix(&dir).unwrap().display().to_string())
        .collect();
    naming.sort();
    assert!(
        naming.is_empty(),
        "these name the `Scheduler` type below the dispatcher; take a `Core` and the `Components` instead:\n  {}",
        naming.join("\n  ")
    );
}

#[test]
fn naming_the_dispatcher_is_found_in_code_but_not_in_comments_or_longer_names() {
    assert!(names_the_dispatcher("use super::{Effects, Scheduler};"));
    assert!(names_the_dispatcher("impl Scheduler {\n}"));
    assert!(!names_the_dispatcher("// the Scheduler routes it\nfn f() {}"));
    assert!(!names_the_dispatcher("struct SchedulerHandle;"));
    assert!(!names_the_dispatcher("fn f() {}\n#[cfg(test)]\nmod tests {\n    use super::Scheduler;\n}"));
}

#[test]
fn a_component_naming_another_is_found() {
    let source = "use super::core::Core;\nuse super::{HashMap, pause, now_ms};\nlet x = super::budget::over_budget(m, k);";
    assert_eq!(components_named("review", source), ["pause", "budget"]);
    assert!(components_named("pause", "use super::pause::Pause;\nuse super::model::Pause;").is_empty());
}

/// What `source`, a file of `scheduler/model/` (`mod.rs` when `is_mod_rs`),
/// names of the scheduler outside the model: the model is the scheduler's
/// base, so every other part may build on it only while it reaches back to
/// none of them. Its own test module may use anything.
fn scheduler_named_by_model(is_mod_rs: bool, source: &str) -> Vec<String> {
    let code = source.split("\n#[cfg(test)]\nmod tests").next().unwrap_or(source);
    let up = if is_mod_rs { "super::" } else { "super::super::" };
    let mut names = Vec::new();
    for prefix in [up, "crate::scheduler::"] {
        for (at, _) in code.match_indices(prefix) {
            let rest = &code[at + prefix.len()..];
            if prefix == "crate::scheduler::" && rest.starts_with("model::") {
                continue;
            }
            let path: String =
                rest.chars().take_while(|c| c.is_alphanumeric() || "_:".contains(*c)).collect();
            names.push(format!("{prefix}{path}"));
        }
    }
    names
}

#[test]
fn the_scheduler_model_imports_nothing_else_of_the_scheduler() {
    let dir = repo_root().join("controller/src/scheduler/model");
    let mut files = Vec::new();
    sources(&dir, &mut files);
    assert!(files.iter().any(|f| f.ends_with("mod.rs")), "no model/mod.rs under {}", dir.display());
    let mut reaches = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        for name in scheduler_named_by_model(file.ends_with("mod.rs"), &source) {
            reaches.push(format!("{} -> {name}", file.file_name().unwrap().to_string_lossy()));
        }
    }
    assert!(
        reaches.is_empty(),
        "scheduler/model/ names the scheduler outside itself; move what it needs into model/:\n  {}",
        reaches.join("\n  ")
    );
}

#[test]
fn a_model_file_reaching_out_of_the_model_is_found() {
    let source = "use super::stored::Stall;\nuse crate::scheduler::model::Task;\n\
                  pub tx: crate::scheduler::outbound::OutboundTx,\nuse super::super::core::Core;";
    assert_eq!(
        scheduler_named_by_model(false, source),
        ["super::super::core::Core", "crate::scheduler::outbound::OutboundTx"]
    );
    assert_eq!(scheduler_named_by_model(true, "use super::Effects;"), ["super::Effects"]);
    let tested = "mod types;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}";
    assert!(scheduler_named_by_model(true, tested).is_empty());
}
