//! The scripted GitHub against real clients: the git CLI pushing, fetching
//! and cloning over smart HTTP (`git.rs`), an HTTP client for REST and
//! GraphQL (`api.rs`), and a webhook receiver (`hooks.rs`).

mod api;
mod git;
mod hooks;

use std::path::Path;
use std::process::Command;

use axum::body::Body;
use axum::http::{HeaderMap, Request as HttpRequest};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::*;

const OWNER: &str = "octo";
const TOKEN: &str = "ghp_owner";

struct Resp {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }
}

/// One request; `token` goes in `Authorization: Bearer`.
async fn call(
    method: &str,
    url: &str,
    token: Option<&str>,
    extra: &[(&str, &str)],
    body: Option<Value>,
) -> Resp {
    let client: Client<_, Body> = Client::builder(TokioExecutor::new()).build_http();
    let mut req =
        HttpRequest::builder().method(method).uri(url).header("accept", "application/vnd.github+json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let body = body.map(|b| Body::from(b.to_string())).unwrap_or_else(Body::empty);
    let resp = client.request(req.body(body).unwrap()).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(Body::new(body), usize::MAX).await.unwrap();
    Resp {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: String::from_utf8_lossy(&bytes).into(),
    }
}

async fn get(gh: &GitHub, path: &str) -> Resp {
    call("GET", &format!("{}{path}", gh.api_url()), Some(TOKEN), &[], None).await
}

async fn send(gh: &GitHub, method: &str, path: &str, body: Value) -> Resp {
    call(method, &format!("{}{path}", gh.api_url()), Some(TOKEN), &[], Some(body)).await
}

/// git in `dir` with only its own config; (exit code, stdout, stderr).
fn git(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "")
        .env("SSH_ASKPASS", "")
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// A server with `octo/app` (default branch `main`) and the owner's token.
fn server() -> GitHub {
    let gh = GitHub::start();
    gh.add_token(TOKEN, OWNER);
    gh.create_repo(OWNER, "app", "main");
    gh
}
