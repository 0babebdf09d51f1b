//! Configurations this crate does not implement exactly are refused with `Error::Unsupported`
//! (the caller then keeps `tokenizers`); the bundled one is accepted.

mod support;

use serde_json::{Value, json};
use wordpiece::{Error, Tokenizer};

fn bundled_json() -> Value {
    serde_json::from_slice(&std::fs::read(support::tokenizer_json()).expect("read")).expect("JSON")
}

fn convert(config: &Value) -> Result<Tokenizer, Error> {
    let hf: tokenizers::Tokenizer = config.to_string().parse().expect("tokenizers loads the variant");
    Tokenizer::from_tokenizers(&hf)
}

#[test]
fn the_bundled_tokenizer_is_accepted_with_its_length_limit() {
    let t = Tokenizer::from_file(support::tokenizer_json()).expect("bundled tokenizer.json");
    assert_eq!(t.max_length(), Some(128));
    let (ids, type_ids) = t.encode("Play some jazz");
    assert_eq!(ids.first(), Some(&101));
    assert_eq!(ids.last(), Some(&102));
    assert_eq!(type_ids, vec![0; ids.len()]);
}

#[test]
fn the_tokenizer_can_be_shared_between_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Tokenizer>();
}

#[test]
fn a_missing_file_is_a_load_error() {
    let err = Tokenizer::from_file("/nonexistent/tokenizer.json").unwrap_err();
    assert!(matches!(err, Error::Load(_)), "{err}");
}

#[test]
fn unimplemented_configurations_are_refused() {
    type Edit = fn(&mut Value);
    let cases: &[(&str, &str, Edit)] = &[
        ("padding", "padding", |c| {
            c["padding"] = json!({"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": null,
                "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"});
        }),
        ("normalizer Sequence", "normalizer Sequence", |c| {
            c["normalizer"] = json!({"type": "Sequence", "normalizers": [c["normalizer"].clone()]});
        }),
        ("no normalizer", "no normalizer", |c| c["normalizer"] = Value::Null),
        ("normalizer Lowercase", "normalizer Lowercase", |c| c["normalizer"] = json!({"type": "Lowercase"})),
        ("pre_tokenizer Whitespace", "pre_tokenizer Whitespace", |c| {
            c["pre_tokenizer"] = json!({"type": "Whitespace"})
        }),
        ("no pre_tokenizer", "no pre_tokenizer", |c| c["pre_tokenizer"] = Value::Null),
        ("unknown token not in the vocabulary", "not in the vocabulary", |c| c["model"]["unk_token"] = json!("<unk>")),
        ("normalized added token", "[CLS]", |c| c["added_tokens"][2]["normalized"] = json!(true)),
        ("lstrip added token", "[MASK]", |c| c["added_tokens"][4]["lstrip"] = json!(true)),
        ("rstrip added token", "[MASK]", |c| c["added_tokens"][4]["rstrip"] = json!(true)),
        ("single_word added token", "[UNK]", |c| c["added_tokens"][1]["single_word"] = json!(true)),
        ("truncation with a stride", "stride", |c| c["truncation"]["stride"] = json!(4)),
        ("truncation OnlySecond", "OnlySecond", |c| c["truncation"]["strategy"] = json!("OnlySecond")),
        ("max_length below the special tokens", "below the 2 special tokens", |c| {
            c["truncation"]["max_length"] = json!(1)
        }),
        ("post_processor RobertaProcessing", "RobertaProcessing", |c| {
            c["post_processor"] = json!({"type": "RobertaProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101],
                "trim_offsets": true, "add_prefix_space": false});
        }),
        ("template naming $B in the single template", "sequence B", |c| {
            c["post_processor"]["single"] = json!([{"Sequence": {"id": "A", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}}]);
        }),
    ];
    for (name, reason, edit) in cases {
        let mut config = bundled_json();
        edit(&mut config);
        match convert(&config) {
            Err(Error::Unsupported(why)) => assert!(why.contains(reason), "{name}: refused because {why}"),
            Err(e) => panic!("{name}: refused, but as {e:?}"),
            Ok(_) => panic!("{name}: accepted"),
        }
    }
}

#[test]
fn the_encoder_falls_back_to_tokenizers_with_the_same_answers() {
    let fast = wordpiece::Encoder::new(support::hf_as_worker());
    assert!(fast.fallback_reason().is_none());

    let mut config = bundled_json();
    config["added_tokens"][4]["lstrip"] = json!(true);
    let hf: tokenizers::Tokenizer = config.to_string().parse().expect("variant loads");
    let fallback = wordpiece::Encoder::new(hf.clone());
    assert!(matches!(fallback.fallback_reason(), Some(Error::Unsupported(_))));
    for text in ["Play some jazz", "add it  [MASK] to my playlist", ""] {
        let e = hf.encode(text, true).expect("encode");
        let want: Vec<i64> = e.get_ids().iter().map(|&i| i64::from(i)).collect();
        assert_eq!(fallback.encode(text).expect("fallback encodes").0, want, "{text:?}");
    }
    assert_eq!(fast.encode("Play some jazz").expect("encodes"), fallback.encode("Play some jazz").expect("encodes"));

    // `encode_into` gives what `encode` gives, on both paths, into reused (cleared) vectors.
    assert!(fast.is_fast() && !fallback.is_fast());
    assert_eq!(fast.max_length(), fallback.max_length());
    let (mut ids, mut types) = (vec![7; 40], vec![7; 40]);
    for encoder in [&fast, &fallback] {
        for text in ["Play some jazz", "add it  [MASK] to my playlist", ""] {
            encoder.encode_into(text, &mut ids, &mut types).expect("encodes");
            assert_eq!((ids.clone(), types.clone()), encoder.encode(text).expect("encodes"), "{text:?}");
        }
    }
}

#[test]
fn special_tokens_encoded_as_text_are_refused() {
    let mut hf = support::hf_as_worker();
    hf.set_encode_special_tokens(true);
    assert!(matches!(Tokenizer::from_tokenizers(&hf), Err(Error::Unsupported(_))));
}

#[test]
fn a_non_wordpiece_model_is_refused() {
    let bpe = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
            "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": null, "decoder": null,
        "model": {"type": "BPE", "dropout": null, "unk_token": "a", "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}
    });
    assert!(matches!(convert(&bpe), Err(Error::Unsupported(_))));
}
