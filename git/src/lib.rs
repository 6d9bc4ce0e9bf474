//! swarm's git engine.
