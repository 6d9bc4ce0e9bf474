//! The two GraphQL mutations REST has no equal for:
//! `markPullRequestReadyForReview` and `convertPullRequestToDraft`, at
//! `POST /api/graphql` as on GitHub Enterprise Server (github.com serves
//! GraphQL at `https://api.github.com/graphql`). The pull request's node id
//! may be written inline, as a variable, or in an `input` variable.
//! Anything else is answered, as GitHub answers a bad query, with 200 and
//! `{"errors": [...]}`.

use serde_json::{Value, json};

use super::reply::{Payload, Reply};
use super::state::State;

const MUTATIONS: [(&str, bool); 2] =
    [("markPullRequestReadyForReview", false), ("convertPullRequestToDraft", true)];

pub(super) fn serve(st: &mut State, body: &Value, login: &str) -> Reply {
    let Some(query) = body.get("query").and_then(Value::as_str) else {
        return Reply::json(
            400,
            json!({"message": "Problems parsing JSON", "documentation_url": "https://docs.github.com/graphql"}),
        );
    };
    let vars = body.get("variables").cloned().unwrap_or(Value::Null);
    let Some((field, draft)) = MUTATIONS.iter().find(|(name, _)| query.contains(name)) else {
        return error(
            None,
            "This scripted GitHub answers only markPullRequestReadyForReview and convertPullRequestToDraft",
        );
    };
    let Some(node) = pull_request_id(query, &vars) else {
        return error(Some(field), "Argument 'pullRequestId' on InputObject is required");
    };
    match st.set_draft(&node, *draft, login) {
        Ok((number, is_draft)) => Reply::json(
            200,
            json!({"data": {*field: {"pullRequest": {"id": node, "isDraft": is_draft, "number": number}}}}),
        ),
        Err(msg) => {
            let mut reply = error(Some(field), &msg);
            if let Payload::Json(v) = &mut reply.body {
                v["data"] = json!({*field: null});
            }
            reply
        }
    }
}

fn error(field: Option<&str>, message: &str) -> Reply {
    let mut e = json!({"message": message, "locations": [{"line": 1, "column": 1}]});
    if let Some(f) = field {
        e["path"] = json!([f]);
        e["type"] =
            json!(if message.starts_with("Could not resolve") { "NOT_FOUND" } else { "UNPROCESSABLE" });
    }
    Reply::json(200, json!({"errors": [e]}))
}

/// The `pullRequestId` the mutation names: `pullRequestId: "X"`,
/// `pullRequestId: $v` with `v` in the variables, or `input: $v` whose
/// value holds it.
fn pull_request_id(query: &str, vars: &Value) -> Option<String> {
    let var_name =
        |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    // Each use of `key` as an argument (not a variable's declaration `$key`).
    let args = |key: &'static str| {
        query.match_indices(key).filter(move |(at, _)| !query[..*at].ends_with('$')).filter_map(
            move |(at, _)| {
                let rest = query[at + key.len()..].trim_start().strip_prefix(':')?;
                Some(rest.trim_start())
            },
        )
    };
    for rest in args("pullRequestId") {
        if let Some(lit) = rest.strip_prefix('"') {
            return lit.split('"').next().map(str::to_string);
        }
        if let Some(var) = rest.strip_prefix('$') {
            return vars.get(var_name(var)).and_then(Value::as_str).map(str::to_string);
        }
    }
    args("input").find_map(|rest| {
        let var = rest.strip_prefix('$')?;
        vars.get(var_name(var))?.get("pullRequestId").and_then(Value::as_str).map(str::to_string)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_id_is_found_inline_in_a_variable_or_in_an_input_variable() {
        let inline = r#"mutation { markPullRequestReadyForReview(input: {pullRequestId: "PR_1"}) { pullRequest { isDraft } } }"#;
        assert_eq!(pull_request_id(inline, &Value::Null).as_deref(), Some("PR_1"));
        let var = "mutation($pullRequestId: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $pullRequestId}) { clientMutationId } }";
        assert_eq!(pull_request_id(var, &json!({"pullRequestId": "PR_2"})).as_deref(), Some("PR_2"));
        let input = "mutation($input: MarkPullRequestReadyForReviewInput!) { markPullRequestReadyForReview(input: $input) { clientMutationId } }";
        assert_eq!(
            pull_request_id(input, &json!({"input": {"pullRequestId": "PR_3"}})).as_deref(),
            Some("PR_3")
        );
    }
}
