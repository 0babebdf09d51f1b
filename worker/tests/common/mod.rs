//! Starts the real worker binary on 127.0.0.1:0 (with `testkit`) and reads back its address.
#![allow(dead_code)]

use testkit::{Server, model_dir, ort_lib};
use tokio::process::Command;

pub fn command(extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_worker"));
    cmd.arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--model")
        .arg(model_dir())
        .arg("--ort-lib")
        .arg(ort_lib())
        .arg("--intra-op-threads")
        .arg("1")
        .args(extra)
        .env("RUST_LOG", "warn");
    cmd
}

/// Starts a worker and waits until it prints its address.
pub async fn start(extra: &[&str]) -> Server {
    Server::start(command(extra)).await
}
