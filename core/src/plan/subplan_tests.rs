use std::sync::Arc;

use crate::ids::SwarmId;
use crate::plan::{Plan, swarm_namespace, task_branch};

const TWO_LEVELS: &str = r#"
name = "app"

[defaults]
command = "sh worker.sh"

[[tasks]]
id = "schema"
files = ["db/**"]

[[tasks]]
id = "auth"
deps = ["schema"]
files = ["auth/**"]

  [[tasks.subtasks]]
  id = "login"
  files = ["auth/login/**"]

    [[tasks.subtasks.subtasks]]
    id = "form"
    files = ["auth/login/form.txt"]

  [[tasks.subtasks]]
  id = "logout"
  deps = ["login"]
  files = ["auth/logout.txt"]
"#;

fn error_of(text: &str) -> String {
    Plan::parse(text).expect_err("the plan must be refused").to_string()
}

#[test]
fn a_two_level_sub_plan_becomes_nested_child_plans() {
    let plan = Arc::new(Plan::parse(TWO_LEVELS).expect("valid plan"));
    let auth = &plan.tasks[1];
    assert!(auth.command.is_empty() && auth.agent.is_none() && auth.verify.is_empty());
    let child = auth.subplan.clone().expect("auth has a sub-plan");
    assert_eq!(child.swarm.as_str(), "app/auth");
    assert_eq!(child.base_branch, "swarm/app/integration");
    assert_eq!(child.integration_branch, "swarm/app/auth");
    assert_eq!(child.integration_branch, task_branch(&plan.swarm, "auth"));
    assert_eq!(task_branch(&child.swarm, "login"), "swarm/app/auth.sub/login");
    // Tasks of the sub-plan inherit the enclosing defaults.
    assert_eq!(child.tasks[1].command.to_vec(), vec!["sh", "-c", "sh worker.sh"]);
    let grandchild = child.tasks[0].subplan.clone().expect("login has a sub-plan");
    assert_eq!(grandchild.swarm.as_str(), "app/auth/login");
    assert_eq!(grandchild.integration_branch, "swarm/app/auth.sub/login");
    assert_eq!(swarm_namespace(&grandchild.swarm), "swarm/app/auth.sub/login.sub/");
    let found = plan.descendant(&SwarmId::new("app/auth/login").expect("id")).expect("descendant");
    assert_eq!(found, grandchild);
    assert!(plan.descendant(&SwarmId::new("app/schema").expect("id")).is_none());
    assert!(plan.descendant(&SwarmId::new("other/auth").expect("id")).is_none());
}

#[test]
fn sub_plans_deeper_than_max_depth_are_refused() {
    let limited = TWO_LEVELS.replace("name = \"app\"", "name = \"app\"\nmax_depth = 1");
    assert_eq!(
        error_of(&limited),
        "tasks[1].subtasks[0].subtasks: sub-plans nest at most 1 deep (max_depth); this one would be level 2"
    );
    let too_much = TWO_LEVELS.replace("name = \"app\"", "name = \"app\"\nmax_depth = 9");
    assert_eq!(error_of(&too_much), "max_depth: must be at most 8");
    // The default limit, 4, refuses a fifth level.
    let mut deep = String::from(
        "name = \"d\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"l0\"\nfiles = [\"a\"]\n",
    );
    let mut table = String::from("tasks");
    for level in 1..=5 {
        table.push_str(".subtasks");
        deep.push_str(&format!("[[{table}]]\nid = \"l{level}\"\nfiles = [\"a\"]\n"));
    }
    let rule = error_of(&deep);
    assert!(rule.contains("nest at most 4 deep"), "{rule}");
}

#[test]
fn a_task_with_a_sub_plan_runs_no_command_or_agent() {
    let both = TWO_LEVELS.replace("id = \"auth\"\n", "id = \"auth\"\ncommand = \"make\"\n");
    assert_eq!(error_of(&both), "tasks[1].command: a task with a sub-plan (subtasks) runs no command");
    let agent = TWO_LEVELS.replace("id = \"auth\"\n", "id = \"auth\"\nagent = \"claude\"\n");
    assert_eq!(error_of(&agent), "tasks[1].agent: a task with a sub-plan (subtasks) runs no agent");
}

#[test]
fn errors_inside_a_sub_plan_name_the_nested_field() {
    let bad_dep = TWO_LEVELS.replace("deps = [\"login\"]", "deps = [\"nope\"]");
    assert_eq!(error_of(&bad_dep), "tasks[1].subtasks[1].deps[0]: unknown task \"nope\"");
    let no_files = TWO_LEVELS.replace("files = [\"auth/login/form.txt\"]", "");
    assert_eq!(
        error_of(&no_files),
        "tasks[1].subtasks[0].subtasks[0].files: a task must own at least one file glob"
    );
}

#[test]
fn a_subplan_table_brings_its_own_defaults() {
    let text = r#"
name = "app"
[defaults]
command = "sh parent.sh"
[[tasks]]
id = "auth"
files = ["auth/**"]
[tasks.subplan]
name = "auth-plan"
defaults = { command = "sh child.sh", retries = 0 }
tasks = [{ id = "login", files = ["auth/login.txt"] }, { id = "bad", files = ["auth/x"], deps = ["bad"] }]
"#;
    assert_eq!(error_of(text), "tasks[0].subplan.tasks[1].deps[0]: a task cannot depend on itself");
    let plan = Plan::parse(&text.replace(", deps = [\"bad\"]", "")).expect("valid");
    let child = plan.tasks[0].subplan.clone().expect("sub-plan");
    assert_eq!(child.tasks[0].command.to_vec(), vec!["sh", "-c", "sh child.sh"]);
    assert_eq!(child.tasks[0].retry.max_retries, 0);
    let both =
        text.replace("[tasks.subplan]", "subtasks = [{ id = \"x\", files = [\"x\"] }]\n[tasks.subplan]");
    assert_eq!(error_of(&both), "tasks[0].subplan: set subtasks or subplan, not both");
}

#[test]
fn a_file_reference_must_be_inlined_before_submission() {
    let text = "name = \"app\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"auth\"\nfiles = [\"a\"]\nplan = \"sub/auth.toml\"\n";
    assert!(error_of(text).starts_with("tasks[0].plan: a sub-plan file is read by swarmctl"));
}

#[test]
fn a_root_plan_name_is_one_id_component() {
    let text = TWO_LEVELS.replace("name = \"app\"", "name = \"app/x\"");
    assert!(error_of(&text).starts_with("name: "), "{}", error_of(&text));
}

#[test]
fn a_sub_plans_tasks_own_only_parts_of_their_parents_files() {
    let outside = TWO_LEVELS.replace("files = [\"auth/logout.txt\"]", "files = [\"api/logout.txt\"]");
    let e = error_of(&outside);
    assert!(
        e.starts_with("tasks[1].subtasks[1].files[0]: \"api/logout.txt\" is not inside the files its parent task \"auth\" owns"),
        "{e}"
    );
    let wider = TWO_LEVELS.replace("files = [\"auth/login/form.txt\"]", "files = [\"auth/**\"]");
    assert!(
        error_of(&wider).starts_with("tasks[1].subtasks[0].subtasks[0].files[0]: \"auth/**\" is not inside")
    );
}
