//! Which sidecars and controllers of different builds work together.
//!
//! The wire is `swarm.v1` protobuf, and what changes between builds is
//! held to one rule: a build may add fields and messages whose absence
//! means what the older build did (proto3 reads an unknown field as
//! nothing and a missing one as its zero value), and never renumbers,
//! retypes or re-means a field. A change that cannot meet that rule is a
//! new protocol revision. A sidecar names the revision it speaks in its
//! Hello (`protocol`; a sidecar from before the field sends 0, which is
//! revision 1), and a controller accepts the revisions from
//! [`OLDEST_PROTOCOL`] to [`PROTOCOL`]: so a fleet is upgraded controller
//! first (it still speaks to the older sidecars), then sidecar by sidecar,
//! while swarms run. The controller's store follows its own rule: a newer
//! controller migrates it forward under the advisory lock, and an older
//! one refuses a store newer than it knows.

/// The protocol revision this build speaks.
pub const PROTOCOL: u32 = 1;
/// The oldest revision a controller of this build still accepts.
pub const OLDEST_PROTOCOL: u32 = 1;

/// The revision a Hello's `protocol` field names.
pub fn revision(field: u32) -> u32 {
    field.max(1)
}

/// Whether a controller of this build speaks with a sidecar of `revision`;
/// the error says what to upgrade.
pub fn accepts(revision: u32) -> Result<(), String> {
    match revision {
        r if r > PROTOCOL => Err(format!(
            "the sidecar speaks protocol revision {r}, newer than this controller's {PROTOCOL}: upgrade the \
             controller first (it accepts older sidecars), then the sidecars"
        )),
        r if r < OLDEST_PROTOCOL => Err(format!(
            "the sidecar speaks protocol revision {r}; this controller accepts {OLDEST_PROTOCOL} to {PROTOCOL}: \
             upgrade the sidecar"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_controller_accepts_its_own_and_older_revisions_and_names_what_to_upgrade() {
        assert_eq!(revision(0), 1, "a sidecar from before the field speaks revision 1");
        assert!(accepts(revision(0)).is_ok() && accepts(PROTOCOL).is_ok());
        let newer = accepts(PROTOCOL + 1).expect_err("newer");
        assert!(newer.contains("upgrade the controller first"), "{newer}");
    }
}
