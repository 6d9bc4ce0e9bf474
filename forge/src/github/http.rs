//! One request to GitHub, done the way every request must be: the API's
//! headers and the token, a body read under a cap, the quota noted, the
//! answer's status turned into a typed error, conditional GETs through
//! the ETag cache, and lists read page by page within bounds.

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;

use super::cache::{EtagCache, Hit};
use super::paging::{self, MAX_PAGES};
use super::ratelimit::{self, Quota};
use crate::error::ForgeError;
use crate::text;
use crate::token::Token;

/// Cap on a JSON answer. GitHub's largest pages of 100 entries are a few
/// hundred KiB.
pub const JSON_CAP: usize = 2 * 1024 * 1024;
/// Cap on a CI job log.
pub const LOG_CAP: usize = 8 * 1024 * 1024;
/// Cap on an error answer; beyond it the message is left out.
const ERROR_CAP: usize = 64 * 1024;
/// Longest message kept from an error answer.
const MESSAGE_MAX: usize = 2048;

const CACHE_ENTRIES: usize = 1024;
const CACHE_BYTES: usize = 32 * 1024 * 1024;

/// An answer that was not an error: its status (2xx, 3xx or 304), headers
/// and body.
pub(crate) struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

pub(crate) struct Http {
    client: reqwest::Client,
    token: Token,
    /// The API base; next links must stay under it.
    base: Url,
    cache: Mutex<EtagCache>,
    quota: Mutex<Option<Quota>>,
}

/// `METHOD /path` for error messages (never the query, which may carry a
/// user's text, and never a host's credentials).
pub(crate) fn what(method: &Method, url: &Url) -> String {
    format!("{method} {}", url.path())
}

impl Http {
    pub fn new(client: reqwest::Client, token: Token, base: Url) -> Http {
        Http {
            client,
            token,
            base,
            cache: Mutex::new(EtagCache::new(CACHE_ENTRIES, CACHE_BYTES)),
            quota: Mutex::new(None),
        }
    }

    pub fn quota(&self) -> Option<Quota> {
        *self.quota.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends one request to the API with the token and returns a 2xx, 3xx
    /// or 304 answer, or the error its status means. `etag` makes it
    /// conditional.
    pub async fn send(
        &self,
        method: Method,
        url: Url,
        json: Option<&serde_json::Value>,
        etag: Option<&str>,
        cap: usize,
    ) -> Result<Reply, ForgeError> {
        let what = what(&method, &url);
        let mut req = self
            .client
            .request(method, url)
            .header(header::ACCEPT, "application/vnd.github+json")
            .header("x-github-api-version", "2022-11-28")
            .header(header::AUTHORIZATION, self.bearer()?);
        if let Some(etag) = etag.and_then(|e| HeaderValue::from_str(e).ok()) {
            req = req.header(header::IF_NONE_MATCH, etag);
        }
        if let Some(json) = json {
            let body = serde_json::to_vec(json)
                .map_err(|e| ForgeError::InvalidInput { what: "request body", message: e.to_string() })?;
            req = req.header(header::CONTENT_TYPE, "application/json").body(body);
        }
        let mut resp = req.send().await.map_err(|e| self.transport_error(&what, e))?;
        let now = SystemTime::now();
        let status = resp.status().as_u16();
        if let Some(q) = ratelimit::quota(resp.headers(), now) {
            *self.quota.lock().unwrap_or_else(PoisonError::into_inner) = Some(q);
        }
        if status < 400 {
            let body = if status == 304 { Vec::new() } else { read_capped(&mut resp, cap, &what).await? };
            return Ok(Reply { status, headers: resp.headers().clone(), body });
        }
        let headers = resp.headers().clone();
        let body = read_capped(&mut resp, ERROR_CAP, &what).await.unwrap_or_default();
        Err(self.status_error(what, status, &headers, &body, now))
    }

    /// Fetches `url` with no token and no API headers: a log's storage URL
    /// that the API redirected to. Only a 2xx is an answer.
    pub async fn fetch_plain(&self, url: Url, cap: usize, timeout: Duration) -> Result<Vec<u8>, ForgeError> {
        let what = format!("GET {} (log storage)", url.host_str().unwrap_or("?"));
        let mut resp =
            self.client.get(url).timeout(timeout).send().await.map_err(|e| self.transport_error(&what, e))?;
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            return read_capped(&mut resp, cap, &what).await;
        }
        let headers = resp.headers().clone();
        let body = read_capped(&mut resp, ERROR_CAP, &what).await.unwrap_or_default();
        Err(self.status_error(what, status, &headers, &body, SystemTime::now()))
    }

    /// A GET through the ETag cache: a 304 returns the copy parsed from
    /// the answer that carried the ETag, with that answer's next link.
    pub async fn get_json<T>(&self, url: Url) -> Result<(T, Option<Url>), ForgeError>
    where
        T: DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let key = url.as_str().to_string();
        let cached = self.cache.lock().unwrap_or_else(PoisonError::into_inner).get(&key);
        let what = what(&Method::GET, &url);
        let reply =
            self.send(Method::GET, url, None, cached.as_ref().map(|h| h.etag.as_str()), JSON_CAP).await?;
        if reply.status == 304 {
            let hit = cached.ok_or_else(|| ForgeError::Malformed {
                what: what.clone(),
                message: "304 Not Modified to a request that was not conditional".into(),
            })?;
            let value = hit.value.downcast::<T>().map_err(|_| ForgeError::Malformed {
                what,
                message: "cached value of another type".into(),
            })?;
            return Ok(((*value).clone(), hit.next));
        }
        if reply.status != 200 {
            return Err(ForgeError::Status {
                what,
                status: reply.status,
                message: "expected 200 with a JSON body".into(),
            });
        }
        let value: T = parse(&what, &reply.body)?;
        let next = self.next_page(&what, &reply.headers)?;
        let etag = reply.headers.get(header::ETAG).and_then(|v| v.to_str().ok()).filter(|e| e.len() <= 256);
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        match etag {
            Some(etag) => {
                let stored: Arc<dyn Any + Send + Sync> = Arc::new(value.clone());
                let hit = Hit { etag: etag.to_string(), value: stored, next: next.clone() };
                cache.insert(&key, hit, reply.body.len());
            }
            None => cache.remove(&key),
        }
        Ok((value, next))
    }

    /// Every page of a list: `items` takes a page's entries out of its
    /// body. Fails past [`MAX_PAGES`].
    pub async fn get_all<P, I>(&self, first: Url, items: impl Fn(P) -> Vec<I>) -> Result<Vec<I>, ForgeError>
    where
        P: DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let what = what(&Method::GET, &first);
        let mut out = Vec::new();
        let mut url = Some(first);
        let mut pages = 0;
        while let Some(u) = url.take() {
            if pages == MAX_PAGES {
                return Err(ForgeError::TooManyPages { what, max_pages: MAX_PAGES });
            }
            pages += 1;
            let (page, next) = self.get_json::<P>(u).await?;
            out.extend(items(page));
            url = next;
        }
        Ok(out)
    }

    /// The checked `rel="next"` link of an answer.
    fn next_page(&self, what: &str, headers: &HeaderMap) -> Result<Option<Url>, ForgeError> {
        let Some(link) = headers.get(header::LINK) else { return Ok(None) };
        let malformed = |message: String| ForgeError::Malformed { what: what.to_string(), message };
        let link = link.to_str().map_err(|_| malformed("a Link header that is not text".into()))?;
        let Some(target) = paging::next_link(link) else { return Ok(None) };
        let next =
            self.base.join(target).map_err(|e| malformed(format!("a next link that is not a URL: {e}")))?;
        if !paging::within(&self.base, &next) {
            return Err(malformed(format!(
                "a next link outside the API ({})",
                text::shown(next.host_str().unwrap_or("?"), 100)
            )));
        }
        Ok(Some(next))
    }

    fn bearer(&self) -> Result<HeaderValue, ForgeError> {
        let mut v = HeaderValue::from_str(&format!("Bearer {}", self.token.expose()))
            .map_err(|_| ForgeError::Config { message: "the token is not a valid header value".into() })?;
        v.set_sensitive(true);
        Ok(v)
    }

    /// Forge text made fit for an error: no controls, short, no token.
    pub fn scrub(&self, message: &str) -> String {
        text::redact(&text::shown(message, MESSAGE_MAX), &[self.token.expose()])
    }

    fn transport_error(&self, what: &str, e: reqwest::Error) -> ForgeError {
        let kind = if e.is_timeout() {
            "timed out"
        } else if e.is_connect() {
            "could not connect"
        } else {
            "request failed"
        };
        // reqwest's text names the URL; ours carry no credentials.
        let message = self.scrub(&format!("{kind}: {e}"));
        ForgeError::Unavailable { what: what.to_string(), status: None, message, retry_at: None }
    }

    /// The error a 4xx or 5xx answer means.
    fn status_error(
        &self,
        what: String,
        status: u16,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> ForgeError {
        let message = self.scrub(&error_message(body));
        if let Some(limited) = ratelimit::limited(status, headers, &message, now) {
            return limited;
        }
        match status {
            401 => ForgeError::Unauthorized { what, message },
            403 => ForgeError::Forbidden { what, message },
            404 | 410 => ForgeError::NotFound { what },
            409 => ForgeError::Conflict { what, message },
            422 => ForgeError::Invalid { what, message },
            500..=599 => ForgeError::Unavailable {
                what,
                status: Some(status),
                message,
                retry_at: ratelimit::retry_after(headers, now),
            },
            _ => ForgeError::Status { what, status, message },
        }
    }
}

/// Parses a JSON answer into `T`, naming the request on failure.
pub(crate) fn parse<T: DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, ForgeError> {
    serde_json::from_slice(body)
        .map_err(|e| ForgeError::Malformed { what: what.to_string(), message: e.to_string() })
}

/// GitHub's error text: `errors[].message` joined (what a 422 says was
/// wrong), else `errors[]`'s field and code, else `message`.
pub(crate) fn error_message(body: &[u8]) -> String {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return String::from_utf8_lossy(&body[..body.len().min(MESSAGE_MAX)]).trim().to_string();
    };
    let top = v.get("message").and_then(|m| m.as_str()).unwrap_or("").to_string();
    let details: Vec<String> = v
        .get("errors")
        .and_then(|e| e.as_array())
        .map(|errors| {
            errors
                .iter()
                .filter_map(|e| match e {
                    serde_json::Value::String(s) => Some(s.clone()),
                    e => e.get("message").and_then(|m| m.as_str()).map(str::to_string).or_else(|| {
                        let field = e.get("field").and_then(|f| f.as_str())?;
                        let code = e.get("code").and_then(|c| c.as_str()).unwrap_or("invalid");
                        Some(format!("{field}: {code}"))
                    }),
                })
                .collect()
        })
        .unwrap_or_default();
    if details.is_empty() { top } else { details.join("; ") }
}

/// Reads a body, failing as soon as it passes `cap` bytes (before reading
/// at all when `content-length` says so).
pub(crate) async fn read_capped(
    resp: &mut reqwest::Response,
    cap: usize,
    what: &str,
) -> Result<Vec<u8>, ForgeError> {
    let too_large = || ForgeError::TooLarge { what: what.to_string(), limit: cap };
    if resp.content_length().is_some_and(|n| n > cap as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    loop {
        let chunk = resp.chunk().await.map_err(|e| ForgeError::Unavailable {
            what: what.to_string(),
            status: None,
            message: format!("reading the answer: {e}"),
            retry_at: None,
        })?;
        let Some(chunk) = chunk else { return Ok(body) };
        if body.len() + chunk.len() > cap {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn githubs_error_answers_become_one_message() {
        let v = br#"{"message":"Validation Failed","errors":[{"resource":"PullRequest","code":"custom","message":"A pull request already exists for o:b."}],"documentation_url":"https://docs.github.com/rest"}"#;
        assert_eq!(error_message(v), "A pull request already exists for o:b.");
        let v = br#"{"message":"Validation Failed","errors":[{"resource":"Issue","field":"title","code":"missing_field"},"plain"]}"#;
        assert_eq!(error_message(v), "title: missing_field; plain");
        assert_eq!(error_message(br#"{"message":"Not Found"}"#), "Not Found");
        assert_eq!(error_message(b"<html>bad gateway</html>"), "<html>bad gateway</html>");
    }
}
