//! Text that came from the forge, made safe to keep and to show.
//!
//! Everything the forge sends is somebody else's text: a PR body, a review
//! comment, a CI log, a `remote:` line from a pre-receive hook. It may be
//! huge, it may carry terminal escape sequences that rewrite an operator's
//! screen (OSC 52 writes the clipboard, CSI moves the cursor over earlier
//! output), and an error built from it may echo a credential back. These
//! three functions are the one place those are dealt with.

/// What [`clip`] appends where it cut. Plain ASCII, so it survives
/// [`strip_controls`] and any terminal.
pub const CLIP_MARKER: &str = "\n[… clipped]";

/// `text` cut to at most `max_bytes` bytes (marker included) on a char
/// boundary, with [`CLIP_MARKER`] where it was cut. Text that fits is
/// returned unchanged. A `max_bytes` smaller than the marker gives the
/// longest prefix that fits, without a marker.
pub fn clip(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let (budget, marker) = match max_bytes.checked_sub(CLIP_MARKER.len()) {
        Some(budget) => (budget, CLIP_MARKER),
        None => (max_bytes, ""),
    };
    let mut cut = budget;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = String::with_capacity(cut + marker.len());
    out.push_str(&text[..cut]);
    out.push_str(marker);
    out
}

/// `text` without terminal control: ANSI escape sequences (CSI, OSC, DCS,
/// SOS, PM, APC and two-byte escapes, 7- and 8-bit forms) are removed
/// whole, and so are the remaining C0 and C1 control characters except
/// `\n` and `\t`, DEL, and the Unicode bidirectional overrides and
/// isolates (which reorder what a reader sees, "Trojan Source").
/// A sequence left open at the end of the text is dropped to the end.
pub fn strip_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            '\u{1b}' => match chars.next() {
                Some('[') => skip_csi(&mut chars),
                Some(']' | 'P' | 'X' | '^' | '_') => skip_string(&mut chars),
                // ESC, intermediates (0x20..=0x2F), one final byte.
                Some(c) if ('\u{20}'..='\u{2f}').contains(&c) => {
                    while chars.next_if(|c| ('\u{20}'..='\u{2f}').contains(c)).is_some() {}
                    chars.next();
                }
                // A two-byte escape (ESC 7, ESC c, ...) or a lone ESC at the end.
                _ => {}
            },
            '\u{9b}' => skip_csi(&mut chars),
            '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            c if c.is_control() => {}
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {}
            c => out.push(c),
        }
    }
    out
}

/// Skips a CSI sequence after its introducer: parameter and intermediate
/// bytes, then one final byte in `@`..=`~`. Anything else ends it early
/// (and is dropped with it), so a malformed sequence cannot swallow text.
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    for c in chars.by_ref() {
        if ('\u{40}'..='\u{7e}').contains(&c) || !('\u{20}'..='\u{3f}').contains(&c) {
            return;
        }
    }
}

/// Skips a control string (OSC, DCS, SOS, PM, APC) up to its terminator:
/// BEL, ST (`ESC \`) or the 8-bit ST.
fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => return,
            '\u{1b}' => {
                chars.next_if_eq(&'\\');
                return;
            }
            _ => {}
        }
    }
}

/// What [`redact`] puts where a secret was.
pub const REDACTED: &str = "***";

/// `text` with every occurrence of every non-empty secret replaced by
/// [`REDACTED`]. Used on anything built from a child's output or a
/// server's answer before it goes into an error or a log.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_string();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        if out.contains(secret) {
            out = out.replace(secret, REDACTED);
        }
    }
    out
}

/// Forge text for display: controls stripped, then clipped.
pub fn shown(text: &str, max_bytes: usize) -> String {
    clip(&strip_controls(text), max_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_text_that_fits_and_cuts_on_a_char_boundary_with_the_marker() {
        assert_eq!(clip("hello", 5), "hello");
        let long = "é".repeat(100); // 200 bytes
        let c = clip(&long, 50);
        assert!(c.len() <= 50, "{}", c.len());
        assert!(c.ends_with(CLIP_MARKER));
        assert!(c.trim_end_matches(CLIP_MARKER).chars().all(|c| c == 'é'));
        // Too small for the marker: just the prefix.
        assert_eq!(clip("abcdef", 3), "abc");
        assert_eq!(clip("ééé", 3), "é");
        assert_eq!(clip("abc", 0), "");
    }

    #[test]
    fn strip_controls_removes_escape_sequences_and_control_characters() {
        assert_eq!(strip_controls("\u{1b}[31mred\u{1b}[0m plain"), "red plain");
        assert_eq!(strip_controls("a\u{1b}]52;c;ZXZpbA==\u{7}b"), "ab", "OSC 52 with BEL");
        assert_eq!(strip_controls("a\u{1b}]0;title\u{1b}\\b"), "ab", "OSC with ST");
        assert_eq!(strip_controls("a\u{1b}Pq#0;2;0;0;0\u{1b}\\b"), "ab", "DCS");
        assert_eq!(strip_controls("a\u{9b}2Jb"), "ab", "8-bit CSI");
        assert_eq!(strip_controls("a\u{9d}8;;http://x\u{9c}b"), "ab", "8-bit OSC");
        assert_eq!(strip_controls("a\u{1b}(Bb\u{1b}7c"), "abc", "charset and two-byte escapes");
        assert_eq!(strip_controls("line\r\nnext\ttab\u{7}\u{8}\u{0}\u{7f}"), "line\nnext\ttab");
        assert_eq!(strip_controls("x\u{202e}gpj.exe"), "xgpj.exe", "bidi override");
        assert_eq!(strip_controls("open \u{1b}]8;;http://evil"), "open ", "unterminated OSC");
        assert_eq!(strip_controls("end\u{1b}"), "end");
        assert_eq!(strip_controls("ünïcode ✓ stays"), "ünïcode ✓ stays");
    }

    #[test]
    fn redact_replaces_every_secret_and_ignores_empty_ones() {
        assert_eq!(redact("a tok b tok", &["tok", ""]), "a *** b ***");
        assert_eq!(redact("nothing", &["secret"]), "nothing");
    }
}
