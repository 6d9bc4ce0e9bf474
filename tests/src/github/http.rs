//! What every REST and GraphQL response goes through, as on GitHub:
//! authentication, the knobs (failures, secondary and primary rate limits),
//! the `x-ratelimit-*` and `x-github-request-id` headers, `ETag` and
//! `If-None-Match` (a 304 does not count against the quota), and the
//! record of every request. What the handlers answer with and page by is
//! `reply.rs`, below both this router and them.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State as Extract;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::{Value, json};

use super::json::message;
use super::reply::{Payload, Query, Reply, authenticate, decode, recorded_headers};
use super::state::{Request, State, now_ms, now_s};
use super::webhooks::hex;
use super::{MAX_BODY, Shared, git_http};
use super::{graphql, rest};

/// Serves one REST or GraphQL request (under the state's lock; nothing
/// here awaits).
pub(super) fn api(st: &mut State, method: &Method, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Response {
    let path = uri.path();
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let login = authenticate(st, headers);
    st.next_id += 1;
    let request_id = format!(
        "{:04X}:{:04X}:{:X}:{:X}:{:08X}",
        st.next_id % 0xffff,
        0x1f2b,
        st.next_id,
        now_s() % 0xfffff,
        now_s()
    );
    let graphql = path == "/api/graphql";
    let resource = if graphql { "graphql" } else { "core" };
    let rest_path = path.strip_prefix("/api/v3").unwrap_or(path);
    let (mut reply, counted) = respond(st, method, uri, headers, &body, &login, graphql, rest_path);
    if counted {
        st.rate.used += 1;
    }
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("x-github-request-id", &request_id)
        .header("x-github-api-version-selected", "2022-11-28")
        .header("x-ratelimit-limit", st.rate.limit.to_string())
        .header("x-ratelimit-remaining", st.rate.remaining().to_string())
        .header("x-ratelimit-reset", st.rate.reset.to_string())
        .header("x-ratelimit-used", st.rate.used.to_string())
        .header("x-ratelimit-resource", resource);
    let content_type = match reply.body {
        Payload::Json(_) => Some("application/json; charset=utf-8"),
        Payload::Empty => None,
    };
    if let Some(ct) = content_type {
        builder = builder.header("content-type", ct);
    }
    for (k, v) in std::mem::take(&mut reply.headers) {
        builder = builder.header(k, v);
    }
    let status = reply.status;
    st.record(Request {
        method: method.to_string(),
        path: uri.path_and_query().map(|p| p.to_string()).unwrap_or_else(|| path.to_string()),
        headers: recorded_headers(headers),
        body,
        login: login.ok().flatten(),
        status,
        unix_ms: now_ms(),
    });
    builder.body(Body::from(reply.bytes())).unwrap_or_else(|_| Response::new(Body::empty()))
}

/// The reply, and whether it counts against the primary limit.
#[allow(clippy::too_many_arguments)]
fn respond(
    st: &mut State,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Value,
    login: &Result<Option<String>, ()>,
    graphql: bool,
    rest_path: &str,
) -> (Reply, bool) {
    if st.fail.0 > 0 {
        st.fail.0 -= 1;
        let text = match st.fail.1 {
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            504 => "Gateway Timeout",
            _ => "Server Error",
        };
        return (Reply::json(st.fail.1, json!({"message": text})), false);
    }
    if st.secondary.0 > 0 {
        st.secondary.0 -= 1;
        let msg = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. \
                   If you reach out to GitHub Support for help, please include the request ID.";
        let body = json!({"message": msg, "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"});
        return (Reply::json(st.secondary.2, body).header("retry-after", st.secondary.1.to_string()), false);
    }
    st.rate.roll();
    if *method == Method::GET && rest_path == "/rate_limit" {
        return (rest::rate_limit(st), false);
    }
    let login = match login {
        Ok(Some(l)) => l.clone(),
        Ok(None) if graphql => {
            let body = json!({"message": "This endpoint requires you to be authenticated.", "documentation_url": "https://docs.github.com/graphql/guides/forming-calls-with-graphql#authenticating-with-graphql"});
            return (Reply::json(401, body), false);
        }
        Ok(None) => return (Reply::json(401, message("Requires authentication")), false),
        Err(()) => return (Reply::json(401, message("Bad credentials")), false),
    };
    if st.rate.remaining() == 0 {
        let body = json!({
            "message": format!("API rate limit exceeded for user ID {}.", super::state::user_id(&login)),
            "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-the-primary-rate-limit",
        });
        return (Reply::json(403, body), false);
    }
    let reply = if graphql {
        if *method == Method::POST {
            graphql::serve(st, body, &login)
        } else {
            Reply::json(404, message("Not Found"))
        }
    } else {
        let q = Query::parse(uri.query());
        let segs: Vec<String> = rest_path.split('/').filter(|s| !s.is_empty()).map(decode).collect();
        let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
        rest::route(st, method, rest_path, &segs, &q, body, &login)
    };
    if *method != Method::GET || reply.status != 200 {
        return (reply, true);
    }
    let etag = format!("W/\"{}\"", hex(ring::digest::digest(&ring::digest::SHA256, &reply.bytes()).as_ref()));
    let matches = headers
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| strip_weak(t.trim()) == strip_weak(&etag)));
    if matches {
        let not_modified = Reply { status: 304, body: Payload::Empty, headers: Vec::new() };
        return (not_modified.header("etag", etag), false);
    }
    (reply.header("etag", etag).header("cache-control", "private, max-age=60, s-maxage=60"), true)
}

fn strip_weak(tag: &str) -> &str {
    tag.strip_prefix("W/").unwrap_or(tag)
}

/// Every request: git's smart HTTP, job logs, or the API (after the
/// test's delay, off the runtime: handlers run git under the lock).
pub(super) async fn handle(Extract(shared): Extract<Arc<Shared>>, req: axum::extract::Request) -> Response {
    let (parts, body) = req.into_parts();
    if let Some(gp) = git_http::parse(parts.uri.path(), parts.uri.query()) {
        return git_http::serve(shared, parts.method, parts.uri, parts.headers, body, gp).await;
    }
    if let Some(id) = parts.uri.path().strip_prefix("/_logs/") {
        let st = shared.lock();
        let log = st.repos.values().flat_map(|r| &r.check_runs).find(|c| c.id.to_string() == id);
        return match log.and_then(|c| c.log.clone()) {
            Some(log) => Response::builder()
                .header("content-type", "text/plain; charset=utf-8")
                .body(Body::from(log))
                .unwrap_or_default(),
            None => status_only(StatusCode::NOT_FOUND),
        };
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return status_only(StatusCode::PAYLOAD_TOO_LARGE);
    };
    let delay = shared.lock().delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let hold = match parts.method.as_str() {
        "GET" | "HEAD" => Duration::ZERO,
        _ => shared.lock().hold_writes,
    };
    let answer = tokio::task::spawn_blocking(move || {
        let mut st = shared.lock();
        api(&mut st, &parts.method, &parts.uri, &parts.headers, &bytes)
    });
    let answer = answer.await.unwrap_or_else(|_| status_only(StatusCode::INTERNAL_SERVER_ERROR));
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
    answer
}

fn status_only(status: StatusCode) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    r
}
