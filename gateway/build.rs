//! Generates KEDA's external scaler protocol (server, and a client for the tests) from
//! `proto/externalscaler.proto` with protox, a protobuf compiler in Rust: no protoc needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/externalscaler.proto";
    println!("cargo:rerun-if-changed={proto}");
    let files = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(files)?;
    Ok(())
}
