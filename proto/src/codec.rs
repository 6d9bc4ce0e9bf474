//! The codec of every swarm.v1 RPC: prost, with small first buffers.
//!
//! tonic gives each call an 8 KiB encode buffer and an 8 KiB decode buffer
//! up front. A controller holds one Connect stream per sidecar for as long
//! as the sidecar lives, nearly all of them idle between heartbeats of a
//! few dozen bytes, so the default buffers alone cost 16 KiB a sidecar
//! (800 MiB at 50,000). A buffer still grows to the size of any message
//! that comes (an Assign, a plan, a pack chunk), and keeps that size only
//! on the streams that carry such messages.

use std::marker::PhantomData;

use tonic::codec::BufferSettings;
use tonic_prost::{ProstDecoder, ProstEncoder};

/// The first size of a call's encode and decode buffers: a heartbeat, an
/// ack or a small report fits without growing it.
pub const FIRST_BUFFER: usize = 256;
/// How much a server stream batches before it yields: tonic's default.
const YIELD_THRESHOLD: usize = 32 * 1024;

/// [`tonic_prost::ProstCodec`] with [`FIRST_BUFFER`]-sized first buffers.
#[derive(Debug)]
pub struct Codec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Codec(PhantomData)
    }
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::new(FIRST_BUFFER, YIELD_THRESHOLD))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(BufferSettings::new(FIRST_BUFFER, YIELD_THRESHOLD))
    }
}
