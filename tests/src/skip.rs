//! A test that cannot run here says so by name and returns; under CI
//! (`CI` set, as CI services set it) a missing prerequisite fails it
//! instead, since a CI machine is meant to have what every test needs.

/// Whether the tests run under CI.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// Reports that `test` is skipped because of `why`; panics under CI.
pub fn skip(test: &str, why: &str) {
    assert!(!in_ci(), "{test} cannot run, and CI is set: {why}");
    eprintln!("skipped {test}: {why}");
}
