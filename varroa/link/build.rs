//! Generates the gRPC code from the checked-in `proto/varroa/link/v1/link.proto` without `protoc`:
//! `protox` (pure Rust) compiles it to a descriptor set, which tonic-prost-build turns into Rust.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/varroa/link/v1/link.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    // No generated `MiteLinkClient::connect(url)` helper: it would clash with the `Connect` rpc,
    // and clients build their own TLS channel anyway.
    tonic_prost_build::configure().build_transport(false).compile_fds(descriptors)?;
    Ok(())
}
