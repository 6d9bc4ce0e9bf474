//! swarm-sidecar.
