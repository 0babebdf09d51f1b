//! Predictions as the protocol answers them: REST JSON ([`rest`]) or gRPC ([`pb`]), with raw
//! contents as Triton's clients read them; and a REST answer turned into a gRPC one (the
//! gateway's gRPC inferences are answered by a worker's REST route).

use wire::Prediction;

use crate::call::{InferCall, Output, encode_raw_bytes};
use crate::pb::ModelInferResponse;
use crate::pb::model_infer_response::InferOutputTensor;
use crate::rest::{InferResponse, OutputTensor, TensorData};
use crate::{OipError, VERSION};

/// One output tensor: its shape and its values.
enum Values<'a> {
    Bytes(Vec<&'a str>),
    Fp32(Vec<f32>),
}

fn tensors<'a>(call: &InferCall, preds: &'a [Prediction]) -> Result<Vec<(Output, Vec<i64>, Values<'a>)>, OipError> {
    call.outputs
        .iter()
        .map(|&o| {
            let values = match o {
                Output::Label => Values::Bytes(preds.iter().map(|p| p.intent.as_str()).collect()),
                Output::Score => Values::Fp32(preds.iter().map(|p| p.score).collect()),
                Output::Logits => {
                    let mut flat = Vec::new();
                    for p in preds {
                        flat.extend_from_slice(logits(p)?);
                    }
                    Values::Fp32(flat)
                }
            };
            Ok((o, shape(call, o, preds)?, values))
        })
        .collect()
}

/// Output `o`'s shape: `[N]`, or `[N, 1]` for `label` and `score` when the input was a column;
/// `[N, width]` for `logits`, the width the last row's (0 without rows).
fn shape(call: &InferCall, o: Output, preds: &[Prediction]) -> Result<Vec<i64>, OipError> {
    let n = preds.len() as i64;
    Ok(match o {
        Output::Label | Output::Score if call.column => vec![n, 1],
        Output::Label | Output::Score => vec![n],
        Output::Logits => {
            vec![n, preds.last().map(|p| logits(p).map(|row| row.len() as i64)).transpose()?.unwrap_or(0)]
        }
    })
}

fn internal(what: &str) -> OipError {
    OipError { error_type: wire::ErrorType::Internal, message: what.to_owned() }
}

/// The REST answer to `call` (of model `model`) with its `predictions`, one per text.
pub fn rest(model: &str, call: &InferCall, predictions: &[Prediction]) -> Result<InferResponse, OipError> {
    let outputs = tensors(call, predictions)?
        .into_iter()
        .map(|(o, shape, values)| OutputTensor {
            name: o.name().to_owned(),
            shape,
            datatype: o.datatype().to_owned(),
            data: match values {
                Values::Bytes(v) => TensorData::Strings(v.into_iter().map(str::to_owned).collect()),
                Values::Fp32(v) => TensorData::Numbers(v),
            },
        })
        .collect();
    Ok(InferResponse {
        model_name: model.to_owned(),
        model_version: Some(VERSION.to_owned()),
        id: call.id.clone(),
        parameters: None,
        outputs,
    })
}

/// [`rest`]'s answer written as JSON: the same bytes as `serde_json::to_vec(&rest(...))`,
/// written directly (no answer built first: the worker's and the gateway's hot path). The
/// outputs' names and datatypes are written as the ASCII literals they are; only the model's
/// name, the id and the labels are escaped.
pub fn rest_json(model: &str, call: &InferCall, predictions: &[Prediction]) -> Result<Vec<u8>, OipError> {
    let mut out = Vec::with_capacity(160 + 48 * predictions.len());
    out.extend_from_slice(b"{\"model_name\":");
    json(&mut out, model)?;
    out.extend_from_slice(b",\"model_version\":");
    json(&mut out, VERSION)?;
    if let Some(id) = &call.id {
        out.extend_from_slice(b",\"id\":");
        json(&mut out, id)?;
    }
    out.extend_from_slice(b",\"outputs\":[");
    for (i, &o) in call.outputs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":\"");
        out.extend_from_slice(o.name().as_bytes());
        out.extend_from_slice(b"\",\"shape\":");
        json(&mut out, &shape(call, o, predictions)?)?;
        out.extend_from_slice(b",\"datatype\":\"");
        out.extend_from_slice(o.datatype().as_bytes());
        out.extend_from_slice(b"\",\"data\":[");
        let mut n = 0;
        for p in predictions {
            match o {
                Output::Label => item(&mut out, &mut n, p.intent.as_str())?,
                Output::Score => item(&mut out, &mut n, &p.score)?,
                Output::Logits => {
                    for x in logits(p)? {
                        item(&mut out, &mut n, x)?;
                    }
                }
            }
        }
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

fn logits(p: &Prediction) -> Result<&[f32], OipError> {
    p.logits.as_deref().ok_or_else(|| internal("a prediction without its logits"))
}

/// `v` written as `serde_json` writes it.
fn json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) -> Result<(), OipError> {
    serde_json::to_writer(out, v).map_err(|e| internal(&e.to_string()))
}

/// `v` as the next item of an array of which `n` items are written (a comma before it unless
/// it is the first).
fn item<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, n: &mut usize, v: &T) -> Result<(), OipError> {
    if *n > 0 {
        out.push(b',');
    }
    *n += 1;
    json(out, v)
}

fn fp32_raw(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn pb_tensor(name: &str, datatype: &str, shape: Vec<i64>) -> InferOutputTensor {
    InferOutputTensor {
        name: name.to_owned(),
        datatype: datatype.to_owned(),
        shape,
        parameters: Default::default(),
        contents: None,
    }
}

/// The gRPC answer to `call`: every output in `raw_output_contents` (what Triton's gRPC client
/// reads for every datatype).
pub fn pb(model: &str, call: &InferCall, predictions: &[Prediction]) -> Result<ModelInferResponse, OipError> {
    let mut resp = ModelInferResponse {
        model_name: model.to_owned(),
        model_version: VERSION.to_owned(),
        id: call.id.clone().unwrap_or_default(),
        ..Default::default()
    };
    for (o, shape, values) in tensors(call, predictions)? {
        resp.outputs.push(pb_tensor(o.name(), o.datatype(), shape));
        resp.raw_output_contents.push(match values {
            Values::Bytes(v) => encode_raw_bytes(v),
            Values::Fp32(v) => fp32_raw(&v),
        });
    }
    Ok(resp)
}

/// [`pb`]'s answer encoded, appended to `out`: the same bytes as `pb(...)?.encode_to_vec()`,
/// written with prost's wire-format primitives, no message built first (the gateway's gRPC hot
/// path). On an error `out` is left as it was.
pub fn pb_write(out: &mut Vec<u8>, model: &str, call: &InferCall, predictions: &[Prediction]) -> Result<(), OipError> {
    use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};
    // Every shape first: the one error (a prediction without its logits) comes before a byte.
    let shapes = call.outputs.iter().map(|&o| shape(call, o, predictions)).collect::<Result<Vec<_>, _>>()?;
    if call.wants(Output::Logits) {
        predictions.iter().try_for_each(|p| logits(p).map(drop))?;
    }
    // A length-delimited field's key and length (every tag here is below 16: a 1-byte key).
    let head = |out: &mut Vec<u8>, tag: u32, len: usize| {
        encode_key(tag, WireType::LengthDelimited, out);
        encode_varint(len as u64, out);
    };
    let field_len = |len: usize| 1 + encoded_len_varint(len as u64) + len;
    // A string field, left out when empty (proto3).
    let string = |out: &mut Vec<u8>, tag: u32, s: &str| {
        if !s.is_empty() {
            head(out, tag, s.len());
            out.extend_from_slice(s.as_bytes());
        }
    };
    string(out, 1, model);
    string(out, 2, VERSION);
    string(out, 3, call.id.as_deref().unwrap_or_default());
    for (&o, shape) in call.outputs.iter().zip(&shapes) {
        let packed: usize = shape.iter().map(|&d| encoded_len_varint(d as u64)).sum();
        let shape_len = if shape.is_empty() { 0 } else { field_len(packed) };
        head(out, 5, field_len(o.name().len()) + field_len(o.datatype().len()) + shape_len);
        string(out, 1, o.name());
        string(out, 2, o.datatype());
        if !shape.is_empty() {
            head(out, 3, packed);
            for &d in shape {
                encode_varint(d as u64, out);
            }
        }
    }
    for &o in &call.outputs {
        match o {
            Output::Label => {
                head(out, 6, predictions.iter().map(|p| 4 + p.intent.len()).sum());
                for p in predictions {
                    out.extend_from_slice(&(p.intent.len() as u32).to_le_bytes());
                    out.extend_from_slice(p.intent.as_bytes());
                }
            }
            Output::Score => {
                head(out, 6, 4 * predictions.len());
                for p in predictions {
                    out.extend_from_slice(&p.score.to_le_bytes());
                }
            }
            Output::Logits => {
                // Every row has its logits (checked above).
                let rows = || predictions.iter().filter_map(|p| p.logits.as_deref());
                head(out, 6, 4 * rows().map(<[f32]>::len).sum::<usize>());
                for x in rows().flatten() {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
    }
    Ok(())
}

/// A REST answer (a worker's) as the gRPC answer: the same tensors, in raw contents.
pub fn pb_from_rest(resp: InferResponse) -> Result<ModelInferResponse, OipError> {
    let mut out = ModelInferResponse {
        model_name: resp.model_name,
        model_version: resp.model_version.unwrap_or_default(),
        id: resp.id.unwrap_or_default(),
        ..Default::default()
    };
    for t in resp.outputs {
        let raw = match (t.datatype.as_str(), &t.data) {
            ("BYTES", TensorData::Strings(v)) => encode_raw_bytes(v.iter().map(String::as_str)),
            ("FP32", TensorData::Numbers(v)) => fp32_raw(v),
            (other, _) => return Err(internal(&format!("a worker's output of datatype {other} with other data"))),
        };
        out.outputs.push(pb_tensor(&t.name, &t.datatype, t.shape));
        out.raw_output_contents.push(raw);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preds() -> Vec<Prediction> {
        let p = |intent: &str, score, logits: [f32; 2]| Prediction {
            intent: intent.into(),
            score,
            scores: None,
            logits: Some(logits.to_vec()),
        };
        vec![p("PlayMusic", 0.75, [2.0, 0.5]), p("BookRestaurant", 0.5, [0.0, 0.0])]
    }

    fn call(column: bool, outputs: &[Output]) -> InferCall {
        InferCall { id: Some("r".into()), texts: vec!["a".into(), "b".into()], column, outputs: outputs.to_vec() }
    }

    #[test]
    fn rest_answers_mirror_the_input_shape_and_name_the_outputs_asked_for() {
        let r = rest("m", &call(false, &Output::DEFAULT), &preds()).unwrap();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["id"], "r");
        assert_eq!(v["model_version"], "1");
        assert_eq!(
            v["outputs"][0],
            serde_json::json!({"name": "label", "shape": [2], "datatype": "BYTES", "data": ["PlayMusic", "BookRestaurant"]})
        );
        assert_eq!(
            v["outputs"][1],
            serde_json::json!({"name": "score", "shape": [2], "datatype": "FP32", "data": [0.75, 0.5]})
        );
        let r = rest("m", &call(true, &[Output::Logits, Output::Score]), &preds()).unwrap();
        assert_eq!((r.outputs[0].name.as_str(), r.outputs[0].shape.as_slice()), ("logits", &[2, 2][..]));
        assert_eq!(r.outputs[0].data, TensorData::Numbers(vec![2.0, 0.5, 0.0, 0.0]));
        // Read back as JSON (the gateway's gRPC path): the same answer.
        let again: InferResponse = serde_json::from_slice(&serde_json::to_vec(&r).unwrap()).unwrap();
        assert_eq!(again, r);
        assert_eq!(r.outputs[1].shape, [2, 1]);
    }

    #[test]
    fn grpc_answers_are_raw_and_match_the_rest_answer_converted() {
        let c = call(true, &Output::ALL);
        let direct = pb("m", &c, &preds()).unwrap();
        assert_eq!(direct.raw_output_contents.len(), 3);
        assert_eq!(
            direct.raw_output_contents[1],
            [0.75f32, 0.5].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>()
        );
        assert_eq!(
            crate::call::decode_raw_bytes(&direct.raw_output_contents[0]).unwrap(),
            ["PlayMusic", "BookRestaurant"]
        );
        let via_rest = pb_from_rest(rest("m", &c, &preds()).unwrap()).unwrap();
        assert_eq!(via_rest, direct);
    }

    /// [`preds`] with a label to escape, a tiny score and a NaN.
    fn odd_preds() -> Vec<Prediction> {
        let mut odd = preds();
        odd[0].intent = "Play \"Music\"\n\u{1F600}".into();
        odd[0].score = 1e-7;
        odd[1].score = f32::NAN;
        odd
    }

    /// Outputs asked for, as the byte-for-byte tests vary them.
    const OUTPUT_SETS: [&[Output]; 4] =
        [&Output::DEFAULT, &Output::ALL, &[Output::Score], &[Output::Logits, Output::Label]];

    #[test]
    fn the_written_answer_is_the_serialized_one_byte_for_byte() {
        for p in [preds(), odd_preds()] {
            for outputs in OUTPUT_SETS {
                for (column, id) in [(false, Some("r")), (true, None), (false, Some("\"q\"\\"))] {
                    let c = InferCall { id: id.map(str::to_owned), ..call(column, outputs) };
                    let want = serde_json::to_vec(&rest("m\"x", &c, &p).unwrap()).unwrap();
                    assert_eq!(
                        String::from_utf8(rest_json("m\"x", &c, &p).unwrap()).unwrap(),
                        String::from_utf8(want).unwrap()
                    );
                }
            }
        }
    }

    #[test]
    fn the_written_grpc_answer_is_the_encoded_one_byte_for_byte() {
        use prost::Message;
        let mut odd = odd_preds();
        odd[1].logits = Some(vec![-1.5; 200]);
        let mut wide = preds();
        wide[0].intent = "x".repeat(300);
        for p in [preds(), odd, wide, preds()[..1].to_vec(), Vec::new()] {
            for outputs in OUTPUT_SETS {
                for (column, id, model) in
                    [(false, Some("r"), "m"), (true, None, ""), (false, Some(""), "snips-minilm-l6")]
                {
                    let c = InferCall { id: id.map(str::to_owned), ..call(column, outputs) };
                    let want = pb(model, &c, &p).unwrap().encode_to_vec();
                    // Appended after what `out` holds (the gRPC frame's prefix, in the gateway).
                    let mut out = vec![7; 5];
                    pb_write(&mut out, model, &c, &p).unwrap();
                    assert_eq!((&out[..5], &out[5..]), (&[7; 5][..], &want[..]), "{model} {outputs:?} {column}");
                }
            }
        }
    }

    #[test]
    fn logits_missing_is_an_internal_error() {
        let mut p = preds();
        p[1].logits = None;
        assert_eq!(rest("m", &call(false, &[Output::Logits]), &p).unwrap_err().error_type, wire::ErrorType::Internal);
        assert_eq!(
            rest_json("m", &call(false, &[Output::Logits]), &p).unwrap_err().error_type,
            wire::ErrorType::Internal
        );
        p.swap(0, 1);
        assert_eq!(
            rest_json("m", &call(false, &[Output::Logits]), &p).unwrap_err().error_type,
            wire::ErrorType::Internal
        );
        for p in [p.clone(), vec![p[1].clone(), p[0].clone()]] {
            let mut out = b"kept".to_vec();
            let e = pb_write(&mut out, "m", &call(false, &[Output::Label, Output::Logits]), &p).unwrap_err();
            assert_eq!((e.error_type, out.as_slice()), (wire::ErrorType::Internal, &b"kept"[..]));
        }
    }
}
