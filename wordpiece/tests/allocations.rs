//! Encoding allocates nothing beyond its output: `encode_into` with grown vectors makes no
//! allocation at all on the project's queries, `encode` exactly its two vectors.
//! (Counted per thread by `allocation-counter`'s global allocator, in this test binary only.)

mod support;

fn queries() -> Vec<String> {
    let mut q = support::snips(true);
    q.extend(support::snips(false));
    q.extend(support::loadtest_queries());
    q.push(q[..40].join(" ")); // truncated
    q.push(String::new());
    q
}

#[test]
fn encode_into_allocates_nothing_once_warm() {
    let t = wordpiece::Tokenizer::from_file(support::tokenizer_json()).expect("tokenizer");
    let queries = queries();
    let (mut ids, mut type_ids) = (Vec::new(), Vec::new());
    for q in &queries {
        t.encode_into(q, &mut ids, &mut type_ids);
    }
    let info = allocation_counter::measure(|| {
        for q in &queries {
            t.encode_into(q, &mut ids, &mut type_ids);
        }
    });
    assert_eq!(info.count_total, 0, "{} queries: {info:?}", queries.len());
}

#[test]
fn encode_allocates_its_two_vectors_and_nothing_else() {
    let t = wordpiece::Tokenizer::from_file(support::tokenizer_json()).expect("tokenizer");
    let queries = queries();
    for q in &queries {
        t.encode(q);
    }
    let info = allocation_counter::measure(|| {
        for q in &queries {
            std::hint::black_box(t.encode(q));
        }
    });
    assert_eq!(info.count_total, 2 * queries.len() as u64, "{info:?}");
}
