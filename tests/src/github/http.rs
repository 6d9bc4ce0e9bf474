//! What every REST and GraphQL response goes through, as on GitHub:
//! authentication, the knobs (failures, secondary and primary rate limits),
//! the `x-ratelimit-*` and `x-github-request-id` headers, `ETag` and
//! `If-None-Match` (a 304 does not count against the quota), pagination
//! with a `Link` header, and the record of every request.

use std::collections::BTreeMap;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State as Extract;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::{Value, json};

use super::json::message;
use super::state::{Request, State, now_ms, now_s};
use super::webhooks::hex;
use super::{MAX_BODY, Shared, git_http};
use super::{graphql, rest};

/// A handler's answer before the cross-cutting headers.
pub(super) struct Reply {
    pub status: u16,
    pub body: Payload,
    pub headers: Vec<(String, String)>,
}

pub(super) enum Payload {
    Json(Value),
    Empty,
}

impl Reply {
    pub fn json(status: u16, body: Value) -> Reply {
        Reply { status, body: Payload::Json(body), headers: Vec::new() }
    }

    pub fn fail((status, body): (u16, Value)) -> Reply {
        Reply::json(status, body)
    }

    pub fn header(mut self, name: &str, value: impl Into<String>) -> Reply {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    fn bytes(&self) -> Vec<u8> {
        match &self.body {
            Payload::Json(v) => v.to_string().into_bytes(),
            Payload::Empty => Vec::new(),
        }
    }
}

/// A query string, decoded, in its order.
pub(super) struct Query(pub Vec<(String, String)>);

impl Query {
    pub fn parse(q: Option<&str>) -> Query {
        let pairs = q
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (decode(k), decode(v))
            })
            .collect();
        Query(pairs)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// Percent-decoding, `+` as a space (query strings).
pub(super) fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Page `page` of `items` as `per_page` and `page` ask (default 30, at
/// most 100), with the `Link` header GitHub writes (next, last, first, prev).
pub(super) fn paginate(st: &State, path: &str, q: &Query, items: Vec<Value>) -> (Vec<Value>, Option<String>) {
    let per_page =
        q.get("per_page").and_then(|v| v.parse::<usize>().ok()).filter(|n| *n > 0).unwrap_or(30).min(100);
    let page = q.get("page").and_then(|v| v.parse::<usize>().ok()).filter(|n| *n > 0).unwrap_or(1);
    let last = items.len().div_ceil(per_page).max(1);
    let link_to = |n: usize| {
        let mut params: Vec<String> =
            q.0.iter()
                .filter(|(k, _)| k != "page")
                .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
                .collect();
        params.push(format!("page={n}"));
        format!("<{}{path}?{}>", st.base, params.join("&"))
    };
    let mut links = Vec::new();
    if page > 1 {
        links.push(format!("{}; rel=\"prev\"", link_to((page - 1).min(last))));
    }
    if page < last {
        links.push(format!("{}; rel=\"next\"", link_to(page + 1)));
        links.push(format!("{}; rel=\"last\"", link_to(last)));
    }
    if page > 1 {
        links.push(format!("{}; rel=\"first\"", link_to(1)));
    }
    let out = items.into_iter().skip((page - 1).saturating_mul(per_page)).take(per_page).collect();
    (out, (!links.is_empty()).then(|| links.join(", ")))
}

/// The login a request's `Authorization` names: `Ok(None)` without one,
/// `Err` for a token the server does not know.
pub(super) fn authenticate(st: &State, headers: &HeaderMap) -> Result<Option<String>, ()> {
    let Some(value) = headers.get("authorization").and_then(|v| v.to_str().ok()) else { return Ok(None) };
    let (scheme, cred) = value.trim().split_once(' ').unwrap_or((value, ""));
    let token = match scheme.to_ascii_lowercase().as_str() {
        "bearer" | "token" => cred.trim().to_string(),
        "basic" => {
            let decoded = base64_decode(cred.trim()).ok_or(())?;
            let decoded = String::from_utf8_lossy(&decoded).into_owned();
            decoded.split_once(':').map(|(_, p)| p.to_string()).ok_or(())?
        }
        _ => return Err(()),
    };
    st.login_of(&token).map(|l| Some(l.to_string())).ok_or(())
}

/// Standard base64 (padding optional); `None` when it is not base64.
pub(super) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Headers kept in the record: all, with credentials reduced to their scheme.
pub(super) fn recorded_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    headers
        .iter()
        .map(|(k, v)| {
            let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
            let v = match k.as_str() {
                "authorization" | "cookie" => {
                    format!("{} <redacted>", v.split(' ').next().unwrap_or_default())
                }
                _ => v,
            };
            (k.as_str().to_string(), v)
        })
        .collect()
}

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
