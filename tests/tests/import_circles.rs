//! No import circle among a crate's modules. A circle (a.rs uses b.rs,
//! which uses a.rs, perhaps through others) means neither file can be read
//! or changed without the other, and a structure drawing cannot put one
//! above the other. A module may use its parent's and its children's
//! items: containment is not a circle. Everything else that names another
//! module of the same crate (`crate::`, `super::`, `self::` paths, in `use`
//! lines or inline, grouped or not) is an arrow, and the arrows must form
//! no cycle.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use swarm_tests::docker::repo_root;

/// A module's path from its crate root: `["scheduler", "core"]`.
type ModPath = Vec<String>;

/// The modules of one crate root (a library, or a binary under
/// `src/bin/NAME/`), each with its file's text.
struct Tree {
    modules: BTreeMap<ModPath, (PathBuf, String)>,
}

impl Tree {
    /// The files under `dir` as modules of a root in `dir`, leaving out
    /// `skip` (a binary's folder, which is a root of its own) and test-only
    /// files, which may use anything.
    fn read(dir: &Path, skip: Option<&Path>) -> Tree {
        let mut modules = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_dir() {
                    if name != "tests" && Some(path.as_path()) != skip {
                        stack.push(path);
                    }
                    continue;
                }
                let Some(stem) = name.strip_suffix(".rs") else { continue };
                if stem == "tests" || stem.ends_with("_tests") {
                    continue;
                }
                let rel = path.parent().unwrap().strip_prefix(dir).unwrap();
                let mut m: ModPath = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
                if !matches!(stem, "mod" | "lib" | "main") {
                    m.push(stem.to_string());
                }
                let text = std::fs::read_to_string(&path).unwrap();
                modules.insert(m, (path, code_of(&text)));
            }
        }
        Tree { modules }
    }

    /// The module a path names from module `from`, if it is one of this
    /// tree's: the longest prefix of the path that is a module.
    fn resolve(&self, from: &ModPath, path: &[String]) -> Option<ModPath> {
        let (mut base, rest) = match path.first().map(String::as_str) {
            Some("crate") => (Vec::new(), &path[1..]),
            Some("self") => (from.clone(), &path[1..]),
            Some("super") => {
                let mut base = from.clone();
                let mut rest = path;
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                (base, rest)
            }
            _ => return None,
        };
        let mut found = self.modules.contains_key(&base).then(|| base.clone());
        for seg in rest {
            base.push(seg.clone());
            if self.modules.contains_key(&base) {
                found = Some(base.clone());
            }
        }
        found
    }

    /// Arrows between modules neither of which contains the other.
    fn arrows(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let mut arrows: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
        for (from, (_, code)) in &self.modules {
            for path in paths_in(code) {
                let Some(to) = self.resolve(from, &path) else { continue };
                if to.starts_with(from) || from.starts_with(&to) {
                    continue;
                }
                arrows.entry(from.clone()).or_default().insert(to);
            }
        }
        arrows
    }
}

/// The code of a file: its test module and comment lines left out (doc
/// links name modules without using them).
fn code_of(text: &str) -> String {
    let code = text.split("\n#[cfg(test)]\nmod tests").next().unwrap_or(text);
    code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// Every `crate::`, `super::` and `self::` path in `code`, with `{...}`
/// groups expanded.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word =
            i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == ':');
        let rest: String = chars[i..chars.len().min(i + 8)].iter().collect();
        if starts_word && ["crate::", "super::", "self::"].iter().any(|p| rest.starts_with(p)) {
            let mut at = i;
            path_at(&chars, &mut at, Vec::new(), &mut out);
            i = at.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// Reads one path (and its groups) from `chars[*at..]`, after `prefix`.
fn path_at(chars: &[char], at: &mut usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    loop {
        while chars.get(*at).is_some_and(|c| c.is_whitespace()) {
            *at += 1;
        }
        if chars.get(*at) == Some(&'{') {
            *at += 1;
            loop {
                path_at(chars, at, prefix.clone(), out);
                while chars.get(*at).is_some_and(|c| c.is_whitespace()) {
                    *at += 1;
                }
                match chars.get(*at) {
                    Some(',') => *at += 1,
                    Some('}') => {
                        *at += 1;
                        break;
                    }
                    _ => break,
                }
                while chars.get(*at).is_some_and(|c| c.is_whitespace()) {
                    *at += 1;
                }
                if chars.get(*at) == Some(&'}') {
                    *at += 1;
                    break;
                }
            }
            return;
        }
        let start = *at;
        while chars.get(*at).is_some_and(|c| c.is_alphanumeric() || *c == '_') {
            *at += 1;
        }
        if *at == start {
            break;
        }
        prefix.push(chars[start..*at].iter().collect());
        if chars.get(*at) == Some(&':') && chars.get(*at + 1) == Some(&':') {
            *at += 2;
        } else {
            break;
        }
    }
    if !prefix.is_empty() {
        out.push(prefix);
    }
}

/// The cycles among `arrows`, as the modules of each strongly connected
/// component of more than one module (Tarjan).
fn circles(arrows: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct Walk<'a> {
        arrows: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, m: &'a ModPath) {
            let n = self.index.len();
            self.index.insert(m, n);
            self.low.insert(m, n);
            self.stack.push(m);
            self.on_stack.insert(m);
            for to in self.arrows.get(m).into_iter().flatten() {
                if !self.index.contains_key(to) {
                    self.visit(to);
                    let low = self.low[m].min(self.low[to]);
                    self.low.insert(m, low);
                } else if self.on_stack.contains(to) {
                    let low = self.low[m].min(self.index[to]);
                    self.low.insert(m, low);
                }
            }
            if self.low[m] == self.index[m] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.push(top.clone());
                    if top == m {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        arrows,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for m in arrows.keys() {
        if !walk.index.contains_key(m) {
            walk.visit(m);
        }
    }
    walk.found
}

/// Each crate root of the workspace: `src/` (library and main binary)
/// and every `src/bin/NAME/` folder.
fn roots() -> Vec<(PathBuf, Option<PathBuf>)> {
    let root = repo_root();
    let mut roots = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let krate = entry.unwrap().path();
        let src = krate.join("src");
        if !src.join("lib.rs").exists() && !src.join("main.rs").exists() {
            continue;
        }
        let bin = src.join("bin");
        roots.push((src.clone(), Some(bin.clone())));
        for b in std::fs::read_dir(&bin).into_iter().flatten() {
            let b = b.unwrap().path();
            if b.is_dir() {
                roots.push((b, None));
            }
        }
    }
    roots.sort();
    roots
}

fn named(tree: &Tree, m: &ModPath) -> String {
    let file = &tree.modules[m].0;
    file.strip_prefix(repo_root()).unwrap_or(file).display().to_string()
}

#[test]
fn no_crate_has_an_import_circle_among_its_modules() {
    let roots = roots();
    assert!(roots.len() >= 10, "the workspace's crates were not found: {roots:?}");
    let mut found = Vec::new();
    for (dir, skip) in &roots {
        let tree = Tree::read(dir, skip.as_deref());
        for circle in circles(&tree.arrows()) {
            found.push(circle.iter().map(|m| named(&tree, m)).collect::<Vec<_>>().join(" <-> "));
        }
    }
    assert!(
        found.is_empty(),
        "import circles (move what both need below both, or pass it in):\n  {}",
        found.join("\n  ")
    );
}

fn tree_of(files: &[(&str, &str)]) -> Tree {
    let modules = files
        .iter()
        .map(|(m, text)| {
            let path: ModPath = m.split('/').filter(|s| !s.is_empty()).map(str::to_string).collect();
            (path, (PathBuf::from(m), code_of(text)))
        })
        .collect();
    Tree { modules }
}

#[test]
fn a_circle_through_grouped_and_inline_paths_is_found() {
    let tree = tree_of(&[
        ("", "mod api;"),
        ("api", "mod logs; mod requests;"),
        ("api/logs", "use super::{requests::{self, Parse}, other};"),
        ("api/requests", "fn f() { crate::api::logs::tail(); }"),
    ]);
    let found = circles(&tree.arrows());
    let want: Vec<ModPath> = vec![vec!["api".into(), "logs".into()], vec!["api".into(), "requests".into()]];
    assert_eq!(found, vec![want]);
}

#[test]
fn a_parent_and_its_child_using_each_other_is_no_circle_nor_is_a_comment() {
    let tree = tree_of(&[
        ("", "mod a; mod b; use a::Thing;"),
        ("a", "use super::Root;\n// see crate::b::x\nuse crate::b::X;"),
        ("b", "/// [`A`](crate::a::A)\nfn f() {}"),
    ]);
    assert!(circles(&tree.arrows()).is_empty());
    let arrows = tree.arrows();
    assert_eq!(arrows.len(), 1, "only a -> b: {:?}", arrows);
}
