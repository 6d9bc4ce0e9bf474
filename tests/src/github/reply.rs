//! What a REST or GraphQL handler answers with and reads from: the reply
//! before the cross-cutting headers, the query string, paging with a
//! `Link` header, and who the credentials name (git's smart HTTP too).
//! Kept apart from the router in `http.rs`, which calls the handlers.

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use serde_json::Value;

use super::state::State;

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

    pub fn bytes(&self) -> Vec<u8> {
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
