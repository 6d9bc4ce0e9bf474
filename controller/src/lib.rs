//! swarm-controller.
