//! Heap allocations per query, side by side: `tokenizers` as the worker calls it, `encode_fast`,
//! and this crate's `encode` and `encode_into`, on the same query mixes as `benches/encode.rs`.
//! Counted on one thread after one warm-up pass (`allocation-counter`, this binary only; a
//! `realloc` counts as one).
//!
//! ```text
//! cargo bench -p wordpiece --bench allocations
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;

type Bufs = (Vec<i64>, Vec<i64>);
type Encoder<'a> = &'a dyn Fn(&str, &mut Bufs);

fn main() {
    let hf = support::hf_as_worker();
    let fast = wordpiece::Tokenizer::from_tokenizers(&hf).expect("bundled tokenizer converts");
    let test = support::snips(true);
    let train = support::snips(false);
    let non_ascii: Vec<String> = test.iter().chain(&train).filter(|q| !q.is_ascii()).cloned().collect();
    let long: Vec<String> = test.chunks(30).map(|c| c.join(" ")).collect();
    let mixes = [
        ("SNIPS test utterances", test.clone()),
        ("loadtest/queries.txt", support::loadtest_queries()),
        ("SNIPS utterances with non-ASCII characters", non_ascii),
        ("long texts (30 utterances each)", long),
    ];
    let worker = |q: &str, _: &mut Bufs| {
        let e = hf.encode(q, true).expect("encode");
        let ids: Vec<i64> = e.get_ids().iter().map(|&i| i64::from(i)).collect();
        let type_ids: Vec<i64> = e.get_type_ids().iter().map(|&i| i64::from(i)).collect();
        black_box((ids, type_ids));
    };
    let encode_fast = |q: &str, _: &mut Bufs| {
        let e = hf.encode_fast(q, true).expect("encode_fast");
        let ids: Vec<i64> = e.get_ids().iter().map(|&i| i64::from(i)).collect();
        let type_ids: Vec<i64> = e.get_type_ids().iter().map(|&i| i64::from(i)).collect();
        black_box((ids, type_ids));
    };
    let encode = |q: &str, _: &mut Bufs| {
        black_box(fast.encode(q));
    };
    let encode_into = |q: &str, b: &mut Bufs| {
        fast.encode_into(q, &mut b.0, &mut b.1);
        black_box(b);
    };
    let encoders: [(&str, Encoder); 4] = [
        ("tokenizers encode (worker)", &worker),
        ("tokenizers encode_fast", &encode_fast),
        ("wordpiece encode", &encode),
        ("wordpiece encode_into", &encode_into),
    ];
    println!("allocations (and bytes allocated) per query");
    for (mix, queries) in &mixes {
        println!("\n{mix}: {} queries", queries.len());
        for (name, enc) in encoders {
            let mut bufs = (Vec::new(), Vec::new());
            for q in queries {
                enc(q, &mut bufs);
            }
            let info = allocation_counter::measure(|| {
                for q in queries {
                    enc(q, &mut bufs);
                }
            });
            let n = queries.len() as f64;
            println!(
                "  {name:<30} {:>8.1} allocations  {:>9.0} bytes",
                info.count_total as f64 / n,
                info.bytes_total as f64 / n
            );
        }
    }
}
