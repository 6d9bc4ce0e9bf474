//! The `swarm.v1` wire contract.
//!
//! Generated prost/tonic code lives in [`v1`]; prost types stay at the
//! edge. Handlers convert them into `swarm-core` domain types with the
//! `TryFrom`/`From` impls in [`convert`], which is where validation happens:
//! a conversion error names the field and the rule.

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("swarm.v1");
}

/// Encoded `FileDescriptorSet` of swarm.v1, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("swarm_v1_descriptor");

pub mod codec;
pub mod compat;
pub mod convert;
pub mod limits;

#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "client")]
pub mod leader;

pub use convert::FieldError;
