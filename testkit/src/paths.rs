//! Paths in the repository and in the build, and the shared fixtures.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Deserialize;

/// The workspace root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("testkit sits in the workspace root").to_owned()
}

/// The bundled model directory, or `WORKER_MODEL`.
pub fn model_dir() -> PathBuf {
    std::env::var_os("WORKER_MODEL").map_or_else(|| repo_root().join("models/snips-minilm-l6"), PathBuf::from)
}

/// ONNX Runtime's shared library: `ORT_DYLIB_PATH`, else what `scripts/fetch-ort.sh` prints (it
/// fetches the library once into `.cache/`; the script is the one place its version is written).
pub fn ort_lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let path = match std::env::var_os("ORT_DYLIB_PATH") {
            Some(p) => PathBuf::from(p),
            None => {
                let script = repo_root().join("scripts/fetch-ort.sh");
                let out = std::process::Command::new(&script)
                    .stderr(std::process::Stdio::inherit())
                    .output()
                    .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
                assert!(out.status.success(), "{} failed; run it by hand to see why", script.display());
                PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
            }
        };
        assert!(
            path.is_file(),
            "{} is missing: run `export ORT_DYLIB_PATH=$(scripts/fetch-ort.sh)` (scripts/test.sh does)",
            path.display()
        );
        path
    })
    .clone()
}

/// A binary of this workspace built by cargo (`target/<profile>/NAME`, beside the running
/// test's `deps/` folder). `cargo test --workspace` builds every binary before any test runs;
/// `cargo test -p e2e` alone does not, hence the message.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/TEST");
    let path = profile_dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: build it first with `cargo build -p {name}` (`cargo test --workspace`, which \
         scripts/test.sh runs, builds every binary before the tests)",
        path.display()
    );
    path
}

/// `models/sanity.json`: queries whose intent the bundled model must get right, and its labels.
#[derive(Debug, Clone, Deserialize)]
pub struct Sanity {
    /// Class labels in the model's output order.
    pub labels: Vec<String>,
    pub queries: Vec<SanityQuery>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SanityQuery {
    pub text: String,
    pub intent: String,
}

pub fn sanity() -> &'static Sanity {
    static SANITY: OnceLock<Sanity> = OnceLock::new();
    SANITY.get_or_init(|| {
        let path = repo_root().join("models/sanity.json");
        let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_slice(&raw).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    })
}
