// Compiles swarm/v1/*.proto with protox (pure Rust), so building needs no
// system protoc.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["swarm/v1/types.proto", "swarm/v1/sidecar.proto", "swarm/v1/operator.proto"];
    for file in &files {
        // tonic-prost-build does not emit these for descriptor-set input.
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["."])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .build_client(std::env::var_os("CARGO_FEATURE_CLIENT").is_some())
        .build_server(std::env::var_os("CARGO_FEATURE_SERVER").is_some())
        // The generated `connect(dst)` constructor collides with the
        // `Connect` RPC; clients build a Channel and call `new` instead.
        .build_transport(false)
        // Small first buffers: a controller holds a stream per sidecar.
        .codec_path("crate::codec::Codec")
        .compile_fds(descriptors.clone())?;
    // Kept for gRPC reflection, so grpcurl works without the .proto files.
    std::fs::write(out_dir.join("swarm_v1_descriptor.bin"), prost::Message::encode_to_vec(&descriptors))?;
    Ok(())
}
