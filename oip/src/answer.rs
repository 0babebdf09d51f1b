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

/// [`rest`]'s answer as its JSON body.
pub fn rest_json(model: &str, call: &InferCall, predictions: &[Prediction]) -> Result<Vec<u8>, OipError> {
    serde_json::to_vec(&rest(model, call, predictions)?).map_err(|e| internal(&e.to_string()))
}

fn logits(p: &Prediction) -> Result<&[f32], OipError> {
    p.logits.as_deref().ok_or_else(|| internal("a prediction without its logits"))
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

    #[test]
    fn logits_missing_is_an_internal_error() {
        let mut p = preds();
        p[1].logits = None;
        for p in [p.clone(), vec![p[1].clone(), p[0].clone()]] {
            let c = call(false, &[Output::Label, Output::Logits]);
            assert_eq!(rest("m", &c, &p).unwrap_err().error_type, wire::ErrorType::Internal);
            assert_eq!(pb("m", &c, &p).unwrap_err().error_type, wire::ErrorType::Internal);
        }
    }
}
