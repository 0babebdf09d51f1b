//! Generates the Open Inference Protocol's gRPC code (messages, server and client) from
//! `proto/grpc_predict_v2.proto` with protox, a protobuf compiler in Rust: no protoc needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/grpc_predict_v2.proto";
    println!("cargo:rerun-if-changed={proto}");
    let files = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(files)?;
    Ok(())
}
