//! Pagination: GitHub lists come a page at a time, the next page named by
//! the `Link` header's `rel="next"` (RFC 8288). The link is the server's
//! text, so it is followed only within the API's own origin: a forged
//! link must not send the token to another host.

use reqwest::Url;

/// Most entries a page may hold; every list request asks for this many.
pub const PER_PAGE: u32 = 100;

/// Most pages read of one list (5,000 entries at 100 a page) before the
/// read fails as `TooManyPages` instead of paging on without end.
pub const MAX_PAGES: usize = 50;

/// The `rel="next"` target of a `Link` header value, if there is one.
/// Malformed parts are skipped, as a browser would.
pub(crate) fn next_link(link: &str) -> Option<&str> {
    let mut rest = link;
    loop {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        let after_lt = rest.strip_prefix('<')?;
        let (target, params_on) = after_lt.split_once('>')?;
        // The parameters run to the next link (a ',' outside quotes).
        let mut end = params_on.len();
        let mut quoted = false;
        for (i, c) in params_on.char_indices() {
            match c {
                '"' => quoted = !quoted,
                ',' if !quoted => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        let params = &params_on[..end];
        let is_next = params.split(';').any(|p| {
            let Some((name, value)) = p.split_once('=') else { return false };
            name.trim().eq_ignore_ascii_case("rel")
                && value
                    .trim()
                    .trim_matches('"')
                    .split_ascii_whitespace()
                    .any(|r| r.eq_ignore_ascii_case("next"))
        });
        if is_next {
            return Some(target.trim());
        }
        rest = &params_on[end..];
    }
}

/// Whether `next` stays where the API lives: same scheme, host and port
/// as `base` (the origin, the boundary the token must not cross), and no
/// credentials of its own. The path is not held to `base`'s: that is the
/// server's own business within its origin.
pub(crate) fn within(base: &Url, next: &Url) -> bool {
    base.scheme() == next.scheme()
        && base.host_str() == next.host_str()
        && base.port_or_known_default() == next.port_or_known_default()
        && next.username().is_empty()
        && next.password().is_none()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_next_link_is_found_among_the_others() {
        let gh = r#"<https://api.github.com/repositories/1300192/issues?page=2>; rel="prev", <https://api.github.com/repositories/1300192/issues?page=4>; rel="next", <https://api.github.com/repositories/1300192/issues?page=515>; rel="last", <https://api.github.com/repositories/1300192/issues?page=1>; rel="first""#;
        assert_eq!(next_link(gh), Some("https://api.github.com/repositories/1300192/issues?page=4"));
        assert_eq!(next_link(r#"<https://x/a?p=1>; rel="first", <https://x/a?p=9>; rel="last""#), None);
        assert_eq!(next_link("<https://x/a,b>; rel=next"), Some("https://x/a,b"), "a comma in the target");
        assert_eq!(next_link(r#"<https://x/1>; title="a, b"; rel="prev next""#), Some("https://x/1"));
        assert_eq!(next_link(""), None);
        assert_eq!(next_link("garbage"), None);
        assert_eq!(next_link(r#"<https://x/1; rel="next""#), None, "unterminated target");
    }

    #[test]
    fn a_next_link_is_followed_only_within_the_api_origin() {
        let base = Url::parse("https://ghe.example.com/api/v3").unwrap();
        let ok = |s: &str| within(&base, &Url::parse(s).unwrap());
        assert!(ok("https://ghe.example.com/api/v3/repositories/1/pulls?page=2"));
        assert!(ok("https://ghe.example.com:443/api/v3/x"));
        assert!(!ok("https://evil.example.com/api/v3/x"));
        assert!(!ok("http://ghe.example.com/api/v3/x"));
        assert!(!ok("https://ghe.example.com:8443/api/v3/x"));
        assert!(!ok("https://u:p@ghe.example.com/api/v3/x"));
        let gh = Url::parse("https://api.github.com").unwrap();
        assert!(within(&gh, &Url::parse("https://api.github.com/repositories/1?page=2").unwrap()));
    }
}
