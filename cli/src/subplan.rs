//! Sub-plan files: `plan = "sub/auth.toml"` in a task.
//!
//! The controller receives plan text, never files, so swarmctl reads each
//! referenced file (relative to the file that names it) and submits it
//! inline, as the task's `subplan` table. A file that names itself, or an
//! ancestor, is a cycle and refused; so is nesting past the deepest any plan
//! may ask for. A plan without file references is submitted as written.

use std::path::{Path, PathBuf};

use swarm_core::plan::MAX_DEPTH_LIMIT;
use toml::{Table, Value};

/// The plan text to submit: `text` (read from `path`) with every sub-plan
/// file inlined. An error names the field, the file and the rule.
pub fn inline(text: &str, path: &Path) -> Result<String, String> {
    // A document that is not TOML, or has no file reference, is left to the
    // plan parser, whose errors say where.
    let Ok(mut doc) = text.parse::<Table>() else { return Ok(text.to_string()) };
    if !text.contains("plan") {
        return Ok(text.to_string());
    }
    let file = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut stack = vec![file];
    if !inline_tasks(&mut doc, "", &mut stack)? {
        return Ok(text.to_string());
    }
    toml::to_string(&doc).map_err(|e| format!("{}: cannot write the inlined plan: {e}", path.display()))
}

/// Inlines the file references among `table`'s tasks (and their sub-plans);
/// true if there was one.
fn inline_tasks(table: &mut Table, at: &str, stack: &mut Vec<PathBuf>) -> Result<bool, String> {
    let Some(Value::Array(tasks)) = table.get_mut("tasks") else { return Ok(false) };
    let mut changed = false;
    for (i, task) in tasks.iter_mut().enumerate() {
        let Value::Table(task) = task else { continue };
        let here = format!("{at}tasks[{i}]");
        if let Some(reference) = task.remove("plan") {
            let Value::String(reference) = reference else {
                return Err(format!("{here}.plan: must be a path to a plan file"));
            };
            let sub = read_subplan(&reference, &format!("{here}.plan"), stack)?;
            task.insert("subplan".into(), Value::Table(sub));
            changed = true;
        }
        if let Some(Value::Table(sub)) = task.get_mut("subplan") {
            changed |= inline_tasks(sub, &format!("{here}.subplan."), stack)?;
        }
        if task.contains_key("subtasks") {
            // Inline sub-plans sit in the same file: `subtasks` reads as a
            // `tasks` array of its own.
            let mut inner = Table::new();
            if let Some(v) = task.remove("subtasks") {
                inner.insert("tasks".into(), v);
            }
            changed |= inline_tasks(&mut inner, &format!("{here}.sub"), stack)?;
            if let Some(v) = inner.remove("tasks") {
                task.insert("subtasks".into(), v);
            }
        }
    }
    Ok(changed)
}

/// Reads the sub-plan file `reference` names, relative to the file on top
/// of `stack`, with its own references inlined.
fn read_subplan(reference: &str, field: &str, stack: &mut Vec<PathBuf>) -> Result<Table, String> {
    let dir = stack.last().and_then(|f| f.parent()).map(Path::to_path_buf).unwrap_or_default();
    let path = dir.join(reference);
    let file =
        std::fs::canonicalize(&path).map_err(|e| format!("{field}: cannot read {}: {e}", path.display()))?;
    if let Some(first) = stack.iter().position(|f| f == &file) {
        let mut chain: Vec<String> = stack[first..].iter().map(|f| f.display().to_string()).collect();
        chain.push(file.display().to_string());
        return Err(format!("{field}: sub-plan files form a cycle: {}", chain.join(" -> ")));
    }
    // The root plan is level 0; the plan itself refuses what its own
    // max_depth does not allow, this only bounds the files read.
    if stack.len() > MAX_DEPTH_LIMIT as usize {
        return Err(format!("{field}: sub-plan files nest more than {MAX_DEPTH_LIMIT} deep"));
    }
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("{field}: cannot read {}: {e}", file.display()))?;
    let mut sub: Table = text.parse().map_err(|e| format!("{field}: {}: {e}", file.display()))?;
    stack.push(file);
    let inlined = inline_tasks(&mut sub, "", stack).map_err(|e| {
        format!("{field}: {}: {e}", stack.last().map(|f| f.display().to_string()).unwrap_or_default())
    });
    stack.pop();
    inlined?;
    Ok(sub)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use swarm_core::plan::Plan;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    const ROOT: &str = "name = \"app\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"auth\"\nfiles = [\"auth/**\"]\nplan = \"sub/auth.toml\"\n";

    #[test]
    fn sub_plan_files_are_inlined_relative_to_the_file_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let root = write(dir.path(), "plan.toml", ROOT);
        write(
            dir.path(),
            "sub/auth.toml",
            "[defaults]\ncommand = \"sh auth.sh\"\n[[tasks]]\nid = \"login\"\nfiles = [\"auth/login/**\"]\nplan = \"login.toml\"\n",
        );
        write(dir.path(), "sub/login.toml", "[[tasks]]\nid = \"form\"\nfiles = [\"auth/login/form\"]\n");
        let text = inline(ROOT, &root).unwrap();
        let plan = Plan::parse(&text).unwrap();
        let auth = plan.tasks[0].subplan.clone().unwrap();
        assert_eq!(auth.swarm.as_str(), "app/auth");
        assert_eq!(auth.tasks[0].id.as_str(), "login");
        let login = auth.tasks[0].subplan.clone().unwrap();
        assert_eq!(login.tasks[0].id.as_str(), "form");
        // The nested file has no defaults: it takes its enclosing plan's.
        assert_eq!(login.tasks[0].command.to_vec(), vec!["sh", "-c", "sh auth.sh"]);
        // A plan without references is submitted as written.
        let plain = "name = \"x\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n";
        assert_eq!(inline(plain, &root).unwrap(), plain);
    }

    #[test]
    fn a_cycle_of_sub_plan_files_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = write(dir.path(), "plan.toml", ROOT);
        write(
            dir.path(),
            "sub/auth.toml",
            "[[tasks]]\nid = \"x\"\nfiles = [\"x\"]\nplan = \"../plan2.toml\"\n",
        );
        write(dir.path(), "plan2.toml", "[[tasks]]\nid = \"y\"\nfiles = [\"y\"]\nplan = \"sub/auth.toml\"\n");
        let e = inline(ROOT, &root).unwrap_err();
        assert!(e.starts_with("tasks[0].plan: "), "{e}");
        assert!(e.contains("sub-plan files form a cycle"), "{e}");
        assert!(e.contains("auth.toml -> ") && e.ends_with("auth.toml"), "{e}");
        // A file naming itself is the shortest cycle.
        write(dir.path(), "sub/auth.toml", "[[tasks]]\nid = \"x\"\nfiles = [\"x\"]\nplan = \"auth.toml\"\n");
        assert!(inline(ROOT, &root).unwrap_err().contains("form a cycle"));
    }

    #[test]
    fn a_missing_sub_plan_file_names_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let root = write(dir.path(), "plan.toml", ROOT);
        let e = inline(ROOT, &root).unwrap_err();
        assert!(e.starts_with("tasks[0].plan: cannot read "), "{e}");
        assert!(e.contains("sub/auth.toml"), "{e}");
    }
}
