//! Git's smart HTTP at `/{owner}/{repo}.git/...`, served by the real
//! `git http-backend` as a CGI program: the request body is piped to its
//! stdin (gzip bodies are inflated by http-backend itself, told by
//! `HTTP_CONTENT_ENCODING`), its `Status:` and other headers become the
//! response's, and the rest of its stdout is streamed back.
//!
//! Access as GitHub's: anyone fetches a public repository; a push needs
//! Basic authentication whose password is a registered token of a user
//! with write access (401 with `WWW-Authenticate: Basic realm="GitHub"`
//! without one, 403 without the permission).

use std::process::Stdio;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio_stream::StreamExt as _;

use super::Shared;
use super::git;
use super::reply::{authenticate, recorded_headers};
use super::state::{Request, now_ms};

/// A request for a repository's git endpoints.
pub(super) struct GitPath {
    pub owner: String,
    pub repo: String,
    pub push: bool,
}

/// `/{owner}/{repo}.git/...`, and whether it is (part of) a push.
pub(super) fn parse(path: &str, query: Option<&str>) -> Option<GitPath> {
    let (owner, tail) = path.strip_prefix('/')?.split_once('/')?;
    let (repo, rest) = tail.split_once('/').unwrap_or((tail, ""));
    let repo = repo.strip_suffix(".git")?;
    let ok = |s: &str| !s.is_empty() && !s.starts_with('.') && !s.contains(['\\', '\0']);
    if !ok(owner) || !ok(repo) || owner == "api" || rest.split('/').any(|s| s == "..") {
        return None;
    }
    let push = rest == "git-receive-pack"
        || (rest == "info/refs" && query.unwrap_or("").split('&').any(|p| p == "service=git-receive-pack"));
    Some(GitPath { owner: owner.to_string(), repo: repo.to_string(), push })
}

fn text(status: u16, body: &str) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "text/plain; charset=utf-8")
        .body(Body::from(body.to_string()))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

fn unauthorized() -> Response {
    let mut r = text(
        401,
        "Invalid username or token. Password authentication is not supported for Git operations.\n",
    );
    r.headers_mut()
        .insert("www-authenticate", axum::http::HeaderValue::from_static("Basic realm=\"GitHub\""));
    r
}

/// Who may do what, decided under the lock: the login, or the refusal.
fn admit(shared: &Shared, gp: &GitPath, headers: &HeaderMap) -> Result<Option<String>, Box<Response>> {
    let st = shared.lock();
    let login = authenticate(&st, headers);
    let refusal = match (&login, st.repo(&gp.owner, &gp.repo)) {
        (Err(()), _) => unauthorized(),
        (Ok(None), Some(r)) if gp.push || r.private => unauthorized(),
        (Ok(None), None) => unauthorized(),
        (Ok(Some(_)), None) => text(404, "Repository not found.\n"),
        (Ok(Some(l)), Some(r)) if !r.can_read(Some(l)) => text(404, "Repository not found.\n"),
        (Ok(Some(l)), Some(r)) if gp.push && !r.can_push(l) => {
            text(403, &format!("Permission to {}/{}.git denied to {l}.\n", r.owner, r.name))
        }
        (Ok(login), Some(_)) => return Ok(login.clone()),
    };
    Err(Box::new(refusal))
}

pub(super) async fn serve(
    shared: Arc<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
    gp: GitPath,
) -> Response {
    let mut record = Request {
        method: method.to_string(),
        path: uri.path_and_query().map(|p| p.to_string()).unwrap_or_else(|| uri.path().to_string()),
        headers: recorded_headers(&headers),
        body: serde_json::Value::Null,
        login: None,
        status: 0,
        unix_ms: now_ms(),
    };
    let login = match admit(&shared, &gp, &headers) {
        Ok(admitted) => admitted,
        Err(refusal) => {
            record.status = refusal.status().as_u16();
            shared.lock().record(record);
            return *refusal;
        }
    };
    record.login.clone_from(&login);
    let response = cgi(&shared, &method, &uri, &headers, body, login.as_deref(), &gp).await;
    record.status = response.status().as_u16();
    shared.lock().record(record);
    response
}

async fn cgi(
    shared: &Arc<Shared>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
    login: Option<&str>,
    gp: &GitPath,
) -> Response {
    let root = shared.lock().root.clone();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut cmd = tokio::process::Command::new("git");
    git::isolate(cmd.as_std_mut());
    cmd.arg("http-backend")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env("GIT_PROJECT_ROOT", &root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", uri.path())
        .env("REQUEST_METHOD", method.as_str())
        .env("QUERY_STRING", uri.query().unwrap_or(""))
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REMOTE_USER", login.unwrap_or(""))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (var, name) in [
        ("CONTENT_TYPE", "content-type"),
        ("CONTENT_LENGTH", "content-length"),
        ("HTTP_CONTENT_ENCODING", "content-encoding"),
        ("GIT_PROTOCOL", "git-protocol"),
    ] {
        if let Some(v) = header(name) {
            cmd.env(var, v);
        }
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return text(500, &format!("starting git http-backend: {e}\n")),
    };
    let (Some(mut stdin), Some(stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return text(500, "git http-backend without pipes\n");
    };
    // What http-backend says goes to the test's stderr, as a web server's error log.
    let complaints = tokio::spawn(async move {
        let mut said = String::new();
        let _ = stderr.read_to_string(&mut said).await;
        if !said.trim().is_empty() {
            eprintln!("git http-backend: {}", said.trim());
        }
    });
    // The body goes in while the answer comes out: neither waits for the other.
    let feeding = tokio::spawn(async move {
        let mut data = body.into_data_stream();
        while let Some(Ok(chunk)) = data.next().await {
            if stdin.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = stdin.shutdown().await;
    });
    let mut out = BufReader::new(stdout);
    let mut status = 200u16;
    let mut builder = Response::builder();
    loop {
        let mut line = String::new();
        match out.read_line(&mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            status = value.split(' ').next().and_then(|s| s.parse().ok()).unwrap_or(500);
        } else {
            builder = builder.header(name.trim(), value);
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    let shared = shared.clone();
    let (owner, repo, push) = (gp.owner.clone(), gp.repo.clone(), gp.push && *method == Method::POST);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match out.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => {
                    if tx.send(Ok(Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    break;
                }
            }
        }
        drop(tx);
        let _ = feeding.await;
        let _ = complaints.await;
        let _ = child.wait().await;
        if push {
            // A push may have moved pull requests' heads: `synchronize`.
            let _ = tokio::task::spawn_blocking(move || shared.lock().refresh(&owner, &repo)).await;
        }
    });
    builder
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .body(Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)))
        .unwrap_or_else(|_| text(500, "bad CGI headers from git http-backend\n"))
}
