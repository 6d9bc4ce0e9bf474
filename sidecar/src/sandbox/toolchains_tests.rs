use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use super::*;

/// A fake `$HOME` (and whatever else a test lays out) in a temp dir.
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("real tempdir");
        std::fs::create_dir_all(root.join("home")).expect("home");
        Tree { _dir: dir, root }
    }

    fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    fn file(&self, rel: &str) -> PathBuf {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("dirs");
        std::fs::write(&p, "x\n").expect("file");
        p
    }

    fn dir(&self, rel: &str) -> PathBuf {
        let p = self.root.join(rel);
        std::fs::create_dir_all(&p).expect("dir");
        p
    }

    fn link(&self, rel: &str, target: &str) {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("dirs");
        symlink(target, &p).expect("symlink");
    }

    fn env(&self, path: &[&str], extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let path: Vec<String> = path.iter().map(|p| self.root.join(p).display().to_string()).collect();
        let mut env = vec![
            ("HOME".to_string(), self.home().display().to_string()),
            ("PATH".to_string(), format!("{}:/usr/bin:/bin", path.join(":"))),
        ];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    }

    fn find(&self, path: &[&str]) -> Vec<PathBuf> {
        find(&self.env(path, &[]), &Guard::default())
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
}

/// pyenv's layout: its bin/ is a link into libexec/, its shims run
/// `pyenv exec`, the interpreters live in versions/.
fn pyenv(t: &Tree) {
    t.file("home/.pyenv/libexec/pyenv");
    t.link("home/.pyenv/bin/pyenv", "../libexec/pyenv");
    t.file("home/.pyenv/shims/python3");
    t.file("home/.pyenv/version");
    t.file("home/.pyenv/plugins/pyenv-virtualenv/shims/activate");
    t.file("home/.pyenv/versions/3.11.7/bin/python3.11");
    t.file("home/.pyenv/versions/3.11.7/lib/python3.11/encodings/__init__.py");
}

fn assert_no_secrets(found: &[PathBuf], t: &Tree) {
    let home = t.home();
    for p in found {
        assert!(!home.starts_with(p), "$HOME or above is never found: {p:?} in {found:?}");
        for c in CREDENTIALS {
            let c = home.join(c);
            assert!(!c.starts_with(p) && !p.starts_with(&c), "{p:?} reaches the credential store {c:?}");
        }
    }
}

#[test]
fn pyenv_shims_lead_to_its_versions_and_the_code_behind_them() {
    let t = Tree::new();
    pyenv(&t);
    t.dir("home/.ssh");
    let found =
        t.find(&["home/.pyenv/plugins/pyenv-virtualenv/shims", "home/.pyenv/shims", "home/.pyenv/bin"]);
    for want in ["home/.pyenv/versions", "home/.pyenv/libexec", "home/.pyenv/version"] {
        assert!(found.contains(&t.p(want)), "{want} in {found:?}");
    }
    // plugins/ holds more than the shims dir on PATH: its exec hooks.
    assert!(found.contains(&t.p("home/.pyenv/plugins")), "{found:?}");
    assert!(!found.contains(&t.p("home/.pyenv/shims")), "a PATH entry is readable anyway: {found:?}");
    assert!(!found.contains(&t.p("home/.pyenv")), "not the whole root: {found:?}");
    assert_no_secrets(&found, &t);
}

#[test]
fn rustups_proxies_lead_to_its_toolchains_and_cargos_registry_but_never_its_credentials() {
    let t = Tree::new();
    t.file("home/.cargo/bin/rustup");
    t.link("home/.cargo/bin/cargo", "rustup");
    t.file("home/.cargo/credentials.toml");
    t.dir("home/.cargo/lib"); // an install's look: the prefix is still refused
    t.dir("home/.cargo/registry/src");
    t.file("home/.rustup/settings.toml");
    t.file("home/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/bin/cargo");
    t.dir("home/.rustup/downloads");
    let found = t.find(&["home/.cargo/bin"]);
    for want in ["home/.rustup/toolchains", "home/.rustup/settings.toml", "home/.cargo/registry"] {
        assert!(found.contains(&t.p(want)), "{want} in {found:?}");
    }
    assert!(!found.iter().any(|p| p == &t.p("home/.cargo") || p == &t.p("home/.rustup")), "{found:?}");
    assert!(!found.iter().any(|p| p.ends_with("credentials.toml")), "{found:?}");
    assert_no_secrets(&found, &t);
}

#[test]
fn rustup_home_and_cargo_home_are_taken_from_the_environment() {
    let t = Tree::new();
    t.file("opt/cargo/bin/rustup");
    t.link("opt/cargo/bin/cargo", "rustup");
    t.file("opt/cargo/credentials");
    t.dir("opt/cargo/registry");
    t.dir("opt/rustup/toolchains/1.90-x86_64-unknown-linux-gnu");
    let (cargo, rustup) = (t.p("opt/cargo"), t.p("opt/rustup"));
    let env = t.env(
        &["opt/cargo/bin"],
        &[("CARGO_HOME", &cargo.display().to_string()), ("RUSTUP_HOME", &rustup.display().to_string())],
    );
    let found = find(&env, &Guard::default());
    assert!(found.contains(&t.p("opt/rustup/toolchains")), "{found:?}");
    assert!(found.contains(&t.p("opt/cargo/registry")), "{found:?}");
    assert!(!found.contains(&cargo), "CARGO_HOME holds credentials: {found:?}");
}

#[test]
fn nvm_finds_each_node_but_not_one_whose_global_npmrc_may_hold_a_token() {
    let t = Tree::new();
    t.file("home/.nvm/nvm.sh");
    t.file("home/.nvm/versions/node/v20.11.0/lib/node_modules/npm/bin/npm-cli.js");
    t.file("home/.nvm/versions/node/v20.11.0/bin/node");
    t.link("home/.nvm/versions/node/v20.11.0/bin/npm", "../lib/node_modules/npm/bin/npm-cli.js");
    t.file("home/.nvm/versions/node/v18.19.0/bin/node");
    t.file("home/.nvm/versions/node/v18.19.0/etc/npmrc");
    let found = t.find(&["home/.nvm/versions/node/v20.11.0/bin"]);
    assert!(found.contains(&t.p("home/.nvm/versions/node/v20.11.0")), "{found:?}");
    assert!(!found.iter().any(|p| p.starts_with(t.p("home/.nvm/versions/node/v18.19.0"))), "{found:?}");
    assert!(!found.contains(&t.p("home/.nvm")), "{found:?}");
}

#[test]
fn a_venv_made_from_a_pyenv_interpreter_leads_to_that_interpreters_prefix() {
    let t = Tree::new();
    pyenv(&t);
    let base = t.p("home/.pyenv/versions/3.11.7/bin");
    t.dir("project/.venv/lib/python3.11/site-packages");
    let cfg = format!("home = {}\ninclude-system-site-packages = false\nversion = 3.11.7\n", base.display());
    std::fs::write(t.p("project/.venv/pyvenv.cfg"), cfg).expect("cfg");
    t.link("project/.venv/bin/python", &base.join("python3.11").display().to_string());
    // Only the venv is on PATH: no pyenv shims.
    let found = t.find(&["project/.venv/bin"]);
    assert!(found.contains(&t.p("project/.venv")), "its site-packages: {found:?}");
    assert!(found.contains(&t.p("home/.pyenv/versions/3.11.7")), "the base's prefix: {found:?}");
    assert!(!found.contains(&t.p("home/.pyenv/versions")), "only the base it was made from: {found:?}");
    // The same through VIRTUAL_ENV alone.
    let venv = t.p("project/.venv").display().to_string();
    let found = find(&t.env(&[], &[("VIRTUAL_ENV", &venv)]), &Guard::default());
    assert!(found.contains(&t.p("home/.pyenv/versions/3.11.7")), "{found:?}");
}

#[test]
fn a_venv_whose_base_prefix_is_home_gets_only_the_standard_library() {
    let t = Tree::new();
    t.file("home/bin/python3.12");
    t.dir("home/lib/python3.12/encodings");
    t.dir("home/.ssh");
    let cfg = format!("home = {}\nversion_info = 3.12.1.final.0\n", t.home().join("bin").display());
    t.dir("venv/bin");
    std::fs::write(t.p("venv/pyvenv.cfg"), cfg).expect("cfg");
    let found = t.find(&["venv/bin"]);
    assert!(found.contains(&t.p("home/lib/python3.12")), "{found:?}");
    assert!(found.contains(&t.p("home/bin")), "{found:?}");
    assert!(!found.contains(&t.home()), "{found:?}");
    assert_no_secrets(&found, &t);
}

#[test]
fn asdf_and_mise_shims_lead_to_their_installs() {
    let t = Tree::new();
    t.file("home/.asdf/shims/node");
    t.file("home/.asdf/installs/nodejs/20.11.0/bin/node");
    t.file("home/.asdf/plugins/nodejs/bin/exec-env");
    t.file("home/.tool-versions");
    t.file("home/.local/share/mise/shims/python");
    t.file("home/.local/share/mise/installs/python/3.12.1/bin/python3.12");
    t.dir("home/.local/share/keyrings");
    let found = t.find(&["home/.asdf/shims", "home/.local/share/mise/shims"]);
    for want in [
        "home/.asdf/installs",
        "home/.asdf/plugins",
        "home/.tool-versions",
        "home/.local/share/mise/installs",
    ] {
        assert!(found.contains(&t.p(want)), "{want} in {found:?}");
    }
    assert!(!found.contains(&t.p("home/.local/share")), "{found:?}");
    assert_no_secrets(&found, &t);
}

#[test]
fn a_link_on_path_leads_to_its_install_but_never_into_a_credential_store() {
    let t = Tree::new();
    // pipx: ~/.local/bin/black is a link into its own venv.
    t.file("home/.local/share/pipx/venvs/black/bin/black");
    t.file("home/.local/share/pipx/venvs/black/pyvenv.cfg");
    t.link("home/.local/bin/black", "../share/pipx/venvs/black/bin/black");
    // A planted link to a key, and one to $HOME's own files.
    t.file("home/.ssh/id_ed25519");
    t.link("home/.local/bin/key", "../../.ssh/id_ed25519");
    t.file("home/notes.txt");
    t.link("home/.local/bin/notes", "../../notes.txt");
    t.file("home/.config/gh/hosts.yml");
    t.link("home/.local/bin/gh-hosts", "../../.config/gh/hosts.yml");
    let found = t.find(&["home/.local/bin"]);
    assert!(found.contains(&t.p("home/.local/share/pipx/venvs/black")), "{found:?}");
    assert_no_secrets(&found, &t);
    assert!(!found.iter().any(|p| p.starts_with(t.p("home/.config"))), "{found:?}");
}

#[test]
fn nothing_is_found_at_or_above_swarms_own_directories() {
    let t = Tree::new();
    let checkout = t.dir("repo");
    let git = t.dir("repo/.git");
    // A venv inside the user's checkout is fine; its git state is not, nor
    // an install whose prefix is the checkout itself.
    t.dir("repo/.venv/bin");
    t.file("repo/.venv/pyvenv.cfg");
    t.dir("repo/.git/hooks-venv/bin");
    t.file("repo/.git/hooks-venv/pyvenv.cfg");
    t.file("repo/bin/tool");
    t.dir("repo/lib");
    t.link("home/tools/tool", &t.p("repo/bin/tool").display().to_string());
    let env = t.env(&["repo/.venv/bin", "repo/.git/hooks-venv/bin", "home/tools"], &[]);
    let guard = Guard { sealed: vec![git.clone()], above: vec![checkout.clone()] };
    let found = find(&env, &guard);
    assert!(found.contains(&t.p("repo/.venv")), "{found:?}");
    assert!(!found.iter().any(|p| p.starts_with(&git) || git.starts_with(p)), "{found:?}");
    assert!(!found.iter().any(|p| checkout.starts_with(p)), "{found:?}");
}

#[test]
fn the_deny_list_refuses_credential_stores_home_and_the_root() {
    let t = Tree::new();
    let home = t.home();
    let denied = denied(Some(&home), Some(&home.join(".cargo")));
    let guard = Guard::default();
    let refused = |p: &Path| !allowed(p, Some(&home), &denied, &guard);
    for c in [".ssh", ".aws", ".docker", ".config/gh", ".npmrc", ".pypirc", ".cargo/credentials.toml"] {
        assert!(refused(&home.join(c)), "{c}");
        assert!(refused(&home.join(c).join("inner")), "inside {c}");
    }
    assert!(refused(&home.join(".config")), "holds .config/gh");
    assert!(refused(&home.join(".cargo")), "holds the cargo credentials");
    assert!(refused(&home), "$HOME");
    assert!(refused(t.root.as_path()), "above $HOME");
    assert!(refused(Path::new("/")), "/");
    assert!(refused(&home.join(".pyenv/../.ssh")), "an unresolved ..");
    // A directory holding a credential file by its name, wherever it is.
    t.file("opt/tool/credentials");
    assert!(refused(&t.p("opt/tool")));
    assert!(!refused(&home.join(".pyenv/versions")), "an ordinary install");
}

#[test]
fn the_report_names_what_was_found_briefly() {
    assert_eq!(describe(&[]), None);
    let found: Vec<PathBuf> = (0..14).map(|n| PathBuf::from(format!("/t/{n}"))).collect();
    let line = describe(&found).expect("a line");
    assert!(line.starts_with(TOOLCHAINS) && line.contains("/t/11") && !line.contains("/t/12"), "{line}");
    assert!(line.ends_with("and 2 more"), "{line}");
}
