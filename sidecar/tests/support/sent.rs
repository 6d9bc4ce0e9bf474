//! The driver's reports as the session sends them: tests read the wire's
//! messages, so they check the conversion at the edge as well.

// Not every test reads every kind of report, and a test keeps them as they come.
#![allow(dead_code, clippy::large_enum_variant)]

use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;
use swarm_sidecar::attempt;

#[derive(Debug, Clone)]
pub enum Report {
    Journaled(Body),
    Progress(v1::Progress),
    Pid,
}

impl From<attempt::Report> for Report {
    fn from(r: attempt::Report) -> Report {
        match r {
            attempt::Report::Journaled(e) => Report::Journaled(Body::from(&e)),
            attempt::Report::Progress(p) => Report::Progress(v1::Progress::from(&p)),
            attempt::Report::Pid { .. } => Report::Pid,
        }
    }
}
