//! The dashboard's page, script and style, compiled into the binary: the
//! controller needs nothing beside it at run time, and the browser loads
//! nothing from elsewhere (the Content-Security-Policy says so).

use axum::extract::{Path, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};

const INDEX: &str = include_str!("assets/index.html");
const LOGIN: &str = include_str!("assets/login.html");
const FILES: &[(&str, &str, &str)] = &[
    ("app.js", "text/javascript; charset=utf-8", include_str!("assets/app.js")),
    ("dag.js", "text/javascript; charset=utf-8", include_str!("assets/dag.js")),
    ("views.js", "text/javascript; charset=utf-8", include_str!("assets/views.js")),
    ("app.css", "text/css; charset=utf-8", include_str!("assets/app.css")),
];

pub async fn index() -> Html<&'static str> {
    Html(INDEX)
}

pub async fn file(Path(name): Path<String>) -> Response {
    match FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, mime, body)) => ([(header::CONTENT_TYPE, *mime)], *body).into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

/// The login page, with `reason` (why the last attempt failed) escaped.
pub fn login_page(reason: &str) -> Html<String> {
    Html(LOGIN.replace("{{reason}}", &escape(reason)))
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Scripts only from this origin, no framing, no sniffing, no referrer,
/// and nothing cached: the data changes and may be sensitive.
pub async fn security_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    let csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
               connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(csp));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_cannot_inject_markup() {
        let page = login_page("<script>alert(1)</script>").0;
        assert!(!page.contains("<script>alert"));
        assert!(page.contains("&lt;script&gt;"));
    }
}
