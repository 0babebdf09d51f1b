//! Nanoseconds per query, side by side in one run: `tokenizers` as the worker calls it
//! (`encode(q, true)` on the bundled `tokenizer.json` with padding off, then the ids and type
//! ids copied into `Vec<i64>` as the worker's queue entry holds them), `tokenizers`
//! `encode_fast`, optionally `rust_tokenizers` (rust-bert's `BertTokenizer`, with
//! `--features rust-tokenizers`), and this crate (`encode`, new vectors each query, as the worker
//! would; `encode_into`, reused vectors).
//!
//! ```text
//! cargo bench -p wordpiece --bench encode [--features rust-tokenizers]
//! ```
//!
//! Query mixes: the 700 SNIPS test utterances; the load generator's queries; the SNIPS
//! utterances (train and test) with a character outside ASCII; long texts (about 30 utterances
//! each, cut at 128 tokens). Each figure is the median (and minimum) of `ROUNDS` rounds, the
//! tokenizers taking turns within a round; with 1 thread, then with 2 threads each running the
//! same loop (ns per query per thread: shared-allocator contention would show as a rise). The
//! main figure is the thread's CPU time per query (what the worker's budget counts, and steadier
//! on a shared machine than wall time, which is printed beside it).
//! `BENCH_ROUND_SECONDS` sets a round's length per tokenizer (default 0.3); `BENCH_ONLY=text`
//! keeps the tokenizers whose name contains `text` (for profiling).

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::time::{Duration, Instant};

const ROUNDS: usize = 7;

type Encoder<'a> = Box<dyn Fn(&str, &mut (Vec<i64>, Vec<i64>)) -> usize + Sync + 'a>;

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let round =
        Duration::from_secs_f64(std::env::var("BENCH_ROUND_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(0.3));
    let hf = support::hf_as_worker();
    let fast = wordpiece::Tokenizer::from_tokenizers(&hf).expect("bundled tokenizer converts");

    #[cfg(feature = "rust-tokenizers")]
    let rt = rust_bert::load();
    let mut encoders: Vec<(&str, Encoder)> = vec![
        (
            "tokenizers encode (worker)",
            Box::new(|q, _| {
                let e = hf.encode(q, true).expect("encode");
                let ids: Vec<i64> = e.get_ids().iter().map(|&i| i64::from(i)).collect();
                let type_ids: Vec<i64> = e.get_type_ids().iter().map(|&i| i64::from(i)).collect();
                black_box(&type_ids);
                black_box(ids).len()
            }),
        ),
        (
            "tokenizers encode_fast",
            Box::new(|q, _| {
                let e = hf.encode_fast(q, true).expect("encode_fast");
                let ids: Vec<i64> = e.get_ids().iter().map(|&i| i64::from(i)).collect();
                let type_ids: Vec<i64> = e.get_type_ids().iter().map(|&i| i64::from(i)).collect();
                black_box(&type_ids);
                black_box(ids).len()
            }),
        ),
    ];
    #[cfg(feature = "rust-tokenizers")]
    encoders.push(("rust_tokenizers BertTokenizer", Box::new(|q, _| rust_bert::encode(&rt, q).0.len())));
    encoders.push((
        "wordpiece encode",
        Box::new(|q, _| {
            let (ids, type_ids) = fast.encode(q);
            black_box(&type_ids);
            black_box(ids).len()
        }),
    ));
    encoders.push((
        "wordpiece encode_into",
        Box::new(|q, bufs| {
            fast.encode_into(q, &mut bufs.0, &mut bufs.1);
            black_box(&bufs.1);
            black_box(&bufs.0).len()
        }),
    ));

    if let Ok(only) = std::env::var("BENCH_ONLY") {
        encoders.retain(|(name, _)| name.contains(&only));
    }
    let mixes = mixes();
    #[cfg(feature = "rust-tokenizers")]
    rust_bert::report_exactness(&rt, &hf, &mixes);

    if encoders.is_empty() {
        return;
    }
    println!(
        "ns per query per thread: CPU time, median of {ROUNDS} rounds [min]; wall time, median; speed-up on CPU \
         time over the first row. {:.1} s per round.",
        round.as_secs_f64()
    );
    for threads in [1, 2] {
        for (mix, queries) in &mixes {
            let bytes = queries.iter().map(String::len).sum::<usize>() / queries.len();
            println!("\n{threads} thread(s), {mix}: {} queries, {bytes} bytes on average", queries.len());
            let mut cpu: Vec<Vec<f64>> = vec![vec![]; encoders.len()];
            let mut wall: Vec<Vec<f64>> = vec![vec![]; encoders.len()];
            for _ in 0..ROUNDS {
                for (i, (_, enc)) in encoders.iter().enumerate() {
                    let (c, w) = ns_per_query(enc, queries, threads, round);
                    cpu[i].push(c);
                    wall[i].push(w);
                }
            }
            let baseline = median(&cpu[0]);
            for (((name, _), c), w) in encoders.iter().zip(&cpu).zip(&wall) {
                let min = c.iter().copied().fold(f64::INFINITY, f64::min);
                let m = median(c);
                println!("  {name:<30} {m:>9.0} [{min:>7.0}]  {:>9.0}  {:>6.1}x", median(w), baseline / m);
            }
        }
    }
}

/// Runs `enc` over `queries` on `threads` threads for about `round`: CPU and wall ns per query
/// per thread (CPU time is the thread's own, so other processes on a shared machine move it less).
fn ns_per_query(enc: &Encoder, queries: &[String], threads: usize, round: Duration) -> (f64, f64) {
    // Calibrate on one pass, then run whole passes.
    let mut bufs = (Vec::new(), Vec::new());
    let start = Instant::now();
    for q in queries {
        black_box(enc(q, &mut bufs));
    }
    let one = start.elapsed().max(Duration::from_micros(1));
    let passes = (round.as_secs_f64() / one.as_secs_f64()).ceil().max(1.0) as usize;
    let per_thread: Vec<(f64, f64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    let mut bufs = (Vec::new(), Vec::new());
                    let (cpu, wall) = (thread_cpu(), Instant::now());
                    for _ in 0..passes {
                        for q in queries {
                            black_box(enc(q, &mut bufs));
                        }
                    }
                    let n = (passes * queries.len()) as f64;
                    ((thread_cpu() - cpu).as_nanos() as f64 / n, wall.elapsed().as_nanos() as f64 / n)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("bench thread")).collect()
    });
    let n = per_thread.len() as f64;
    (per_thread.iter().map(|t| t.0).sum::<f64>() / n, per_thread.iter().map(|t| t.1).sum::<f64>() / n)
}

fn thread_cpu() -> Duration {
    Duration::from(nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).expect("thread CPU clock"))
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn mixes() -> Vec<(&'static str, Vec<String>)> {
    let test = support::snips(true);
    let train = support::snips(false);
    let non_ascii: Vec<String> = test.iter().chain(&train).filter(|q| !q.is_ascii()).cloned().collect();
    let long: Vec<String> = test.chunks(30).map(|c| c.join(" ")).collect();
    vec![
        ("SNIPS test utterances", test),
        ("loadtest/queries.txt", support::loadtest_queries()),
        ("SNIPS utterances with non-ASCII characters", non_ascii),
        ("long texts (30 utterances each)", long),
    ]
}

#[cfg(feature = "rust-tokenizers")]
mod rust_bert {
    //! rust-bert's tokenizer on the same vocabulary (written out as `vocab.txt`), lowercasing and
    //! stripping accents as `BertNormalizer` does here, truncating to 128 like the worker.

    use rust_tokenizers::tokenizer::{BertTokenizer, Tokenizer, TruncationStrategy};

    pub fn load() -> BertTokenizer {
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(super::support::tokenizer_json()).expect("read")).expect("JSON");
        let vocab = json["model"]["vocab"].as_object().expect("vocab");
        let mut by_id: Vec<(&str, u64)> = vocab.iter().map(|(k, v)| (k.as_str(), v.as_u64().expect("id"))).collect();
        by_id.sort_by_key(|&(_, id)| id);
        assert!(by_id.iter().enumerate().all(|(i, &(_, id))| i as u64 == id), "dense ids");
        let path = std::env::temp_dir().join(format!("wordpiece-bench-vocab-{}.txt", std::process::id()));
        let text: String = by_id.iter().map(|(t, _)| format!("{t}\n")).collect();
        std::fs::write(&path, text).expect("write vocab.txt");
        let t = BertTokenizer::from_file(&path, true, true).expect("rust_tokenizers loads the vocabulary");
        let _ = std::fs::remove_file(&path);
        t
    }

    pub fn encode(t: &BertTokenizer, q: &str) -> (Vec<i64>, Vec<i64>) {
        let e = t.encode(q, None, 128, &TruncationStrategy::LongestFirst, 0);
        let type_ids = e.segment_ids.iter().map(|&i| i64::from(i)).collect();
        (e.token_ids, type_ids)
    }

    /// How many queries of each mix (and of some odd inputs) rust_tokenizers encodes differently
    /// from `tokenizers`; the first few differences.
    pub fn report_exactness(t: &BertTokenizer, hf: &tokenizers::Tokenizer, mixes: &[(&str, Vec<String>)]) {
        println!("rust_tokenizers vs tokenizers (same ids?):");
        let odd: Vec<String> = [
            "play [MASK] now",
            "a\u{200b}b",
            "tab\there",
            "x\u{85}y",
            "\u{fffd}",
            "ﬁne",
            "Ꭰ",
            "日本語",
            "e\u{301}",
            "$5 & 10%",
            "don't",
            "\u{1F600}",
            "İstanbul",
            "\u{E000}x",
            "\u{378}",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("{} end", "x".repeat(120)), format!("{} end", "é".repeat(90))])
        .collect();
        let odd = ("odd inputs", odd);
        let mut shown = 0;
        for (mix, queries) in mixes.iter().chain([&odd]) {
            let mut differ = 0;
            for q in queries {
                let e = hf.encode(q.as_str(), true).expect("encode");
                let want: Vec<i64> = e.get_ids().iter().map(|&i| i64::from(i)).collect();
                let got = encode(t, q).0;
                if got != want {
                    differ += 1;
                    if shown < 12 {
                        shown += 1;
                        println!("    {q:?}: tokenizers {want:?}, rust_tokenizers {got:?}");
                    }
                }
            }
            println!("  {mix}: {differ} of {} differ", queries.len());
        }
    }
}
