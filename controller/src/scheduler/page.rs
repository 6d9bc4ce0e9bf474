//! A page of a list the Operator API returns: its size and the opaque
//! token of where it starts. A request type, so it lives apart from the
//! reads that answer it.

use crate::error::SchedError;

/// A page when the caller names no size.
pub const DEFAULT_PAGE_SIZE: usize = 1_000;
/// The largest page: bounds the work one read costs the scheduler thread.
pub const MAX_PAGE_SIZE: usize = 10_000;

/// Which part of a list to return: up to `size` items after the item the
/// opaque `token` names (empty: from the start). Tokens are the sort key of
/// the last item returned, so a list that changes between pages neither
/// repeats nor skips what stayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub size: usize,
    pub token: String,
}

impl Default for Page {
    /// The first page, of the default size.
    fn default() -> Page {
        Page { size: DEFAULT_PAGE_SIZE, token: String::new() }
    }
}

impl Page {
    /// `size` 0 means the default; above the maximum is the caller's error.
    pub fn new(size: u32, token: String) -> Result<Page, SchedError> {
        let size = match size as usize {
            0 => DEFAULT_PAGE_SIZE,
            n if n > MAX_PAGE_SIZE => {
                return Err(SchedError::InvalidArgument {
                    field: "page_size".into(),
                    rule: format!("must be at most {MAX_PAGE_SIZE}"),
                });
            }
            n => n,
        };
        if token.len() > 256 || token.chars().any(char::is_control) {
            return Err(bad_token());
        }
        Ok(Page { size, token })
    }

    /// The items after the token, in key order, and the next page's token.
    pub(super) fn take<T>(&self, mut keyed: Vec<(String, T)>) -> (Vec<T>, String) {
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        let start = if self.token.is_empty() { 0 } else { keyed.partition_point(|(k, _)| *k <= self.token) };
        let rest = keyed.len().saturating_sub(start);
        let mut next = String::new();
        let page: Vec<T> = keyed
            .into_iter()
            .skip(start)
            .take(self.size)
            .enumerate()
            .map(|(i, (k, v))| {
                if i + 1 == self.size && rest > self.size {
                    next = k;
                }
                v
            })
            .collect();
        (page, next)
    }
}

pub(super) fn bad_token() -> SchedError {
    SchedError::InvalidArgument {
        field: "page_token".into(),
        rule: "is not a token this list returned".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_the_token_and_end_with_an_empty_one() {
        let items: Vec<(String, u32)> = (0..5).map(|i| (format!("k{i}"), i)).collect();
        let p = Page::new(2, String::new()).expect("page");
        let (a, t) = p.take(items.clone());
        assert_eq!((a, t.as_str()), (vec![0, 1], "k1"));
        let (b, t) = Page::new(2, t).expect("page").take(items.clone());
        assert_eq!((b, t.as_str()), (vec![2, 3], "k3"));
        let (c, t) = Page::new(2, t).expect("page").take(items.clone());
        assert_eq!((c, t.as_str()), (vec![4], ""));
        // Exactly a page left: no token pointing at an empty page.
        let (d, t) = Page::new(5, String::new()).expect("page").take(items);
        assert_eq!((d.len(), t.as_str()), (5, ""));
        assert!(Page::new(MAX_PAGE_SIZE as u32 + 1, String::new()).is_err());
        assert!(Page::new(1, "a\u{1b}".into()).is_err());
        assert_eq!(Page::new(0, String::new()).expect("page").size, DEFAULT_PAGE_SIZE);
    }
}
