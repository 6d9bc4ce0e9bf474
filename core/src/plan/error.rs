//! What a plan that breaks a rule is told: where, and which rule.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError {
    /// Where in the document, e.g. `tasks[3].deps[0]`.
    pub path: String,
    /// The rule that was broken.
    pub rule: String,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() { f.write_str(&self.rule) } else { write!(f, "{}: {}", self.path, self.rule) }
    }
}

impl std::error::Error for PlanError {}

pub(super) fn err(path: impl Into<String>, rule: impl Into<String>) -> PlanError {
    PlanError { path: path.into(), rule: rule.into() }
}
