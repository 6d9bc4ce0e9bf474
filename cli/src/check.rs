//! `swarmctl check PLAN`: a hand-written plan checked offline, with the
//! controller's own parser and then against the repository it will run on
//! (`swarm_core::plan::repo_rules`): owned globs that exist, disjoint files
//! for tasks that may run at once, shared lockfiles and registries, verify
//! tiers when the repository has tests, estimates for a planned plan, and
//! no task owning most of the tree.
//!
//! Exit codes, as `sandbox check`: 0 when nothing is an error (warnings are
//! printed and allowed), 1 when some finding is an error, 3 when the plan
//! does not parse or the repository cannot be read.

use std::path::Path;

use anyhow::Context as _;
use serde::Serialize;
use swarm_core::plan::Plan;
use swarm_core::plan::repo_rules::{Finding, RepoFacts, RuleConfig, Severity, check_against_repo};

use crate::cli::{CheckArgs, Format};
use crate::exit::{self, Usage};

/// Parses `plan_toml` as the controller would and checks it against
/// `repo`; a plan that does not parse is the one finding of its error.
pub fn check_plan_text(
    plan_toml: &str,
    repo: &RepoFacts,
    cfg: &RuleConfig,
) -> Result<(Plan, Vec<Finding>), Finding> {
    let plan = Plan::parse(plan_toml).map_err(|e| Finding::from(&e))?;
    let findings = check_against_repo(&plan, repo, cfg);
    Ok((plan, findings))
}

/// The files git tracks in the repository at `dir` (its index, as `git
/// ls-files`), and whether it has a test command.
pub fn repo_facts(dir: &Path) -> anyhow::Result<RepoFacts> {
    let repo = git2::Repository::open(dir)
        .map_err(|e| Usage(format!("--repo {}: not a git repository: {}", dir.display(), e.message())))?;
    let index = repo.index().with_context(|| format!("reading the git index of {}", dir.display()))?;
    let files: Vec<String> = index.iter().map(|e| String::from_utf8_lossy(&e.path).into_owned()).collect();
    let root = repo.workdir().unwrap_or(dir);
    Ok(RepoFacts { has_test_command: has_test_command(root, &files), files })
}

/// Whether the repository's top level says how to run its tests: a Cargo,
/// Go or Python project, a package.json with a `test` script, or a
/// Makefile with a `test:` target.
fn has_test_command(root: &Path, files: &[String]) -> bool {
    let tracked = |name: &str| files.iter().any(|f| f == name);
    if ["Cargo.toml", "go.mod", "pyproject.toml", "pytest.ini", "setup.cfg"].iter().any(|f| tracked(f)) {
        return true;
    }
    let read = |name: &str| if tracked(name) { std::fs::read_to_string(root.join(name)).ok() } else { None };
    let npm_test = read("package.json")
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|v| v.pointer("/scripts/test").is_some_and(|t| t.is_string()));
    let make_test = ["Makefile", "makefile", "GNUmakefile"]
        .iter()
        .filter_map(|m| read(m))
        .any(|text| text.lines().any(|l| l.starts_with("test:") || l.starts_with("test ")));
    npm_test || make_test
}

#[derive(Serialize)]
struct Report<'a> {
    valid: bool,
    findings: &'a [Finding],
}

pub fn run(args: CheckArgs) -> anyhow::Result<u8> {
    if !(args.max_share > 0.0 && args.max_share <= 1.0) {
        return Err(Usage(format!("--max-share {}: must be above 0 and at most 1", args.max_share)).into());
    }
    let shown = args.plan.display();
    let text =
        std::fs::read_to_string(&args.plan).map_err(|e| Usage(format!("cannot read plan {shown}: {e}")))?;
    // Sub-plan files are read here, as `create` and `run` do.
    let text = crate::subplan::inline(&text, &args.plan).map_err(|e| Usage(format!("{shown}: {e}")))?;
    let repo = repo_facts(&args.repo)?;
    let cfg = RuleConfig { max_share: args.max_share, planned: args.planned };
    let json = args.out.output != Format::Table;
    let findings = match check_plan_text(&text, &repo, &cfg) {
        Ok((_, findings)) => findings,
        Err(parse) => {
            if json {
                print_report(args.out.output, &[parse])?;
            } else {
                let at = if parse.path.is_empty() { String::new() } else { format!("{}: ", parse.path) };
                eprintln!("error: {shown}: {at}{}", parse.rule);
            }
            return Ok(exit::USAGE);
        }
    };
    let errors = findings.iter().filter(|f| f.severity == Severity::Error).count();
    if json {
        print_report(args.out.output, &findings)?;
    } else {
        for f in &findings {
            println!("{f}");
        }
        let warnings = findings.len() - errors;
        let verdict = if errors == 0 { "ok" } else { "invalid" };
        println!(
            "{shown}: {verdict}: {errors} error{}, {warnings} warning{} against {} files",
            plural(errors),
            plural(warnings),
            repo.files.len()
        );
    }
    Ok(if errors == 0 { exit::SUCCESS } else { exit::FAILURE })
}

fn print_report(format: Format, findings: &[Finding]) -> anyhow::Result<()> {
    let report = Report { valid: !findings.iter().any(|f| f.severity == Severity::Error), findings };
    match format {
        Format::Yaml => print!("{}", serde_yaml::to_string(&report)?),
        _ => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_command_is_found_in_the_project_files_that_name_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert!(has_test_command(dir.path(), &files(&["src/x.rs", "Cargo.toml"])));
        assert!(!has_test_command(dir.path(), &files(&["README.md"])));
        std::fs::write(dir.path().join("package.json"), r#"{"scripts":{"build":"tsc"}}"#).expect("write");
        assert!(!has_test_command(dir.path(), &files(&["package.json"])));
        std::fs::write(dir.path().join("package.json"), r#"{"scripts":{"test":"jest"}}"#).expect("write");
        assert!(has_test_command(dir.path(), &files(&["package.json"])));
        std::fs::write(dir.path().join("Makefile"), "build:\n\tcc x.c\ntest: build\n\t./t\n").expect("write");
        assert!(has_test_command(dir.path(), &files(&["Makefile"])));
    }

    #[test]
    fn a_plan_that_does_not_parse_is_one_finding_naming_its_field() {
        let text = "name = \"p\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\ndeps = [\"x\"]\n";
        let e = check_plan_text(text, &RepoFacts::default(), &RuleConfig::default()).expect_err("refused");
        assert_eq!((e.path.as_str(), e.severity), ("tasks[0].deps[0]", Severity::Error));
        let ok = text.replace("deps = [\"x\"]\n", "");
        let (plan, findings) =
            check_plan_text(&ok, &RepoFacts::default(), &RuleConfig::default()).expect("ok");
        assert_eq!((plan.tasks.len(), findings), (1, vec![]));
    }
}
