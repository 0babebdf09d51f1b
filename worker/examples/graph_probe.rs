//! Checks the CUDA graph path on a GPU against the plain path, batch by batch, and times both:
//! wall time and process CPU per batch. Used in a GPU sitting (benches/RESULTS.md).
//!
//!   graph_probe MODEL_DIR ORT_LIB MODE [REPEATS [SYNC]]
//!
//! MODE: `single` (one shape, repeated), `warm` (every bucketed shape warmed up first, as the worker
//! does, then a mix), `two` (as `warm`, with a second graph session warming up on another thread at
//! the same time, as the worker's two lanes do). SYNC: `auto` (default) or `blocking` (`--cuda-sync`).
use std::path::{Path, PathBuf};
use std::time::Instant;

use worker::backend::ort::{OrtBackend, SessionOptions, load_library};
use worker::backend::{Backend, Device, InputBatch, ShapeBuckets};
use worker::config::CudaSync;
use worker::model::ModelDir;

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: f64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

fn batch(rows: usize, seq: usize, salt: i64) -> InputBatch {
    let rows: Vec<(Vec<i64>, Vec<i64>)> = (0..rows)
        .map(|r| {
            let len = 3 + (r + salt as usize) % seq.saturating_sub(2).max(1);
            let len = len.min(seq);
            let ids: Vec<i64> = (0..len)
                .map(|i| if i == 0 { 101 } else { 1000 + (i as i64 * 37 + r as i64 * 11 + salt) % 20000 })
                .collect();
            (ids, vec![0; len])
        })
        .collect();
    InputBatch::pad_to(rows.iter().map(|(i, t)| (&i[..], &t[..])), |_, _| (rows.len(), seq))
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter().flatten().zip(b.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (dir, lib, mode) = (PathBuf::from(&args[1]), PathBuf::from(&args[2]), args[3].clone());
    let repeats: usize = args.get(4).and_then(|r| r.parse().ok()).unwrap_or(200);
    let cuda_sync = if args.get(5).is_some_and(|s| s == "blocking") { CudaSync::Blocking } else { CudaSync::Auto };
    let env = load_library(Some(Path::new(&lib))).expect("library");
    let model = ModelDir::load(&dir, None).expect("model");
    let n = model.labels.len();
    let plain_opts = SessionOptions { cuda_sync, ..SessionOptions::new(Device::Cuda(0), 1) };
    let graph_opts = SessionOptions { cuda_graph: true, spinning: false, ..plain_opts };
    let plain_opts = SessionOptions { spinning: false, ..plain_opts };
    let buckets = ShapeBuckets { max_rows: 256, max_seq: model.max_tokens };
    let mut plain = OrtBackend::load_with(&env, &model.model_path, &plain_opts, n).expect("plain session");
    let load_graph = || {
        let b = OrtBackend::load_with(&env, &model.model_path, &graph_opts, n).expect("graph session");
        if mode == "single" { b } else { b.with_shape_buckets(buckets, 16384).expect("warm-up") }
    };
    let mut graph = if mode == "two" {
        std::thread::scope(|s| {
            let other = s.spawn(load_graph);
            let mine = load_graph();
            let _other = other.join().expect("other lane");
            mine
        })
    } else {
        load_graph()
    };
    println!("{mode}: sessions ready");
    let shapes: &[(usize, usize)] = if mode == "single" {
        &[(1, 16), (1, 16), (1, 16)]
    } else {
        &[(1, 16), (2, 16), (1, 16), (64, 32), (256, 16), (1, 16), (8, 48)]
    };
    for (k, &(rows, seq)) in shapes.iter().enumerate() {
        let input = batch(rows, seq, k as i64);
        let want = plain.infer(&input).expect("plain");
        match graph.infer(&input) {
            Ok(got) => println!("{mode}: {rows}x{seq} max |diff| {:.4}", max_diff(&want, &got)),
            Err(e) => {
                println!("{mode}: {rows}x{seq} FAILED: {e}");
                std::process::exit(1);
            }
        }
    }
    for (rows, seq) in [(1, 16), (64, 16), (256, 16), (256, 32)] {
        let input = batch(rows, seq, 7);
        for (name, b) in [("plain", &mut plain), ("graph", &mut graph)] {
            b.infer(&input).expect("warm");
            let (t0, c0) = (Instant::now(), cpu_seconds());
            for _ in 0..repeats {
                b.infer(&input).expect("run");
            }
            let (wall, cpu) = (t0.elapsed().as_secs_f64(), cpu_seconds() - c0);
            println!(
                "{mode}: {name} {rows}x{seq}: {:.3} ms/batch wall, {:.3} ms/batch CPU",
                wall * 1e3 / repeats as f64,
                cpu * 1e3 / repeats as f64
            );
        }
    }
}
