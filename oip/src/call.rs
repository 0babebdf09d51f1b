//! An inference request of either flavour, checked and reduced to what the model needs: the
//! texts, the shape to answer in, and the outputs asked for ([`InferCall`]). Each refusal is an
//! `invalid_request` [`OipError`] saying what was wrong.

use serde_json::Value;

use crate::pb::{ModelInferRequest, model_infer_request::InferInputTensor};
use crate::rest::{InferRequest, InputTensor, RequestedOutput};
use crate::{INPUT, OipError};

/// An output tensor of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Label,
    Score,
    Logits,
}

impl Output {
    pub const ALL: [Output; 3] = [Output::Label, Output::Score, Output::Logits];
    /// What an inference answers when it names no output (the logits only when named).
    pub const DEFAULT: [Output; 2] = [Output::Label, Output::Score];

    pub fn name(self) -> &'static str {
        match self {
            Self::Label => "label",
            Self::Score => "score",
            Self::Logits => "logits",
        }
    }

    pub fn datatype(self) -> &'static str {
        match self {
            Self::Label => "BYTES",
            Self::Score | Self::Logits => "FP32",
        }
    }

    fn parse(name: &str) -> Result<Self, OipError> {
        Self::ALL.into_iter().find(|o| o.name() == name).ok_or_else(|| {
            OipError::invalid(format!("unknown output {name:?}: the model's outputs are label, score and logits"))
        })
    }
}

/// A checked inference request.
#[derive(Debug, Clone, PartialEq)]
pub struct InferCall {
    /// Echoed in the answer.
    pub id: Option<String>,
    /// The queries, in order.
    pub texts: Vec<String>,
    /// The input was `[N, 1]`: `label` and `score` are answered `[N, 1]` too.
    pub column: bool,
    /// The outputs to answer, in the order asked for.
    pub outputs: Vec<Output>,
}

impl InferCall {
    pub fn wants(&self, o: Output) -> bool {
        self.outputs.contains(&o)
    }

    /// The input tensor's shape.
    pub fn shape(&self) -> Vec<i64> {
        let n = self.texts.len() as i64;
        if self.column { vec![n, 1] } else { vec![n] }
    }

    /// A REST body (JSON) of a `POST .../infer`.
    pub fn from_json(body: &[u8]) -> Result<Self, OipError> {
        let req: InferRequest =
            serde_json::from_slice(body).map_err(|e| OipError::invalid(format!("not an inference request: {e}")))?;
        Self::from_rest(req)
    }

    /// A REST body in Triton's binary tensor data extension: `header_len` bytes of JSON (the
    /// `Inference-Header-Content-Length` header's value), then the bytes of each input whose
    /// `parameters.binary_data_size` says so, in order (a BYTES tensor's as its raw contents:
    /// each element a 4-byte little-endian length and its bytes). An input without that
    /// parameter carries its `data` in the JSON as usual. The answer is JSON all the same
    /// (`binary_data` on outputs is accepted and ignored, as Triton's clients read either).
    pub fn from_binary(body: &[u8], header_len: usize) -> Result<Self, OipError> {
        let (header, mut binary) = body.split_at_checked(header_len).ok_or_else(|| {
            OipError::invalid(format!(
                "Inference-Header-Content-Length is {header_len} but the body is {} bytes",
                body.len()
            ))
        })?;
        let mut req: InferRequest =
            serde_json::from_slice(header).map_err(|e| OipError::invalid(format!("not an inference request: {e}")))?;
        let mut raw = None;
        for input in &mut req.inputs {
            let Some(size) = input.parameters.as_ref().and_then(|p| p.get("binary_data_size")) else {
                continue;
            };
            let size = size
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| OipError::invalid(format!("input {:?}: binary_data_size is not a size", input.name)))?;
            let Some((bytes, rest)) = binary.split_at_checked(size) else {
                return Err(OipError::invalid(format!(
                    "input {:?}: binary_data_size is {size} but {} bytes follow the JSON",
                    input.name,
                    binary.len()
                )));
            };
            binary = rest;
            if input.name == INPUT {
                raw = Some(bytes);
            }
        }
        if !binary.is_empty() {
            return Err(OipError::invalid(format!(
                "{} bytes follow the JSON that no input's binary_data_size claims",
                binary.len()
            )));
        }
        Self::from_rest_with(req, raw)
    }

    pub fn from_rest(req: InferRequest) -> Result<Self, OipError> {
        Self::from_rest_with(req, None)
    }

    /// [`InferCall::from_rest`], input `text`'s elements read from `raw` (a BYTES tensor's raw
    /// contents) when given, else from its `data`.
    fn from_rest_with(req: InferRequest, raw: Option<&[u8]>) -> Result<Self, OipError> {
        let outputs = outputs(req.outputs.iter().flatten().map(|o| o.name.as_str()))?;
        let input = one_input(req.inputs, |i| i.name.as_str())?;
        let (texts, column) = text_input(&input.datatype, &input.shape, || {
            if let Some(raw) = raw {
                return decode_raw_bytes(raw);
            }
            if input.data.is_null() {
                return Err(OipError::invalid(
                    "input \"text\" has no data (nor binary data: Inference-Header-Content-Length)",
                ));
            }
            let mut texts = Vec::new();
            flatten(input.data, &mut texts).map(|()| texts)
        })?;
        Ok(Self { id: req.id.filter(|id| !id.is_empty()), texts, column, outputs })
    }

    pub fn from_pb(req: ModelInferRequest) -> Result<Self, OipError> {
        let input = one_input(req.inputs, |i: &InferInputTensor| i.name.as_str())?;
        let (texts, column) =
            text_input(&input.datatype, &input.shape, || match (req.raw_input_contents.first(), input.contents) {
                (Some(raw), _) => decode_raw_bytes(raw),
                (None, Some(c)) => c.bytes_contents.into_iter().map(utf8).collect(),
                (None, None) => Err(OipError::invalid("input \"text\" has no contents")),
            })?;
        let outputs = outputs(req.outputs.iter().map(|o| o.name.as_str()))?;
        Ok(Self { id: Some(req.id).filter(|id| !id.is_empty()), texts, column, outputs })
    }

    /// The same request as a REST body (the gateway forwards gRPC inferences to a worker's REST
    /// route): every output named, so the worker answers exactly those.
    pub fn to_rest(&self) -> InferRequest {
        InferRequest {
            id: self.id.clone(),
            parameters: None,
            inputs: vec![InputTensor {
                name: INPUT.to_owned(),
                shape: self.shape(),
                datatype: "BYTES".to_owned(),
                parameters: None,
                data: Value::Array(self.texts.iter().cloned().map(Value::String).collect()),
            }],
            outputs: Some(
                self.outputs.iter().map(|o| RequestedOutput { name: o.name().to_owned(), parameters: None }).collect(),
            ),
        }
    }
}

/// The request's one input, `text`.
fn one_input<T>(inputs: Vec<T>, name: impl Fn(&T) -> &str) -> Result<T, OipError> {
    match <[T; 1]>::try_from(inputs) {
        Ok([one]) if name(&one) == INPUT => Ok(one),
        Ok([one]) => Err(OipError::invalid(format!("unknown input {:?}: the model's input is \"text\"", name(&one)))),
        Err(inputs) => Err(OipError::invalid(format!("expected one input, \"text\"; got {}", inputs.len()))),
    }
}

/// Input `text`'s strings (`read` once its datatype and shape are checked) and whether it is a
/// column (`[N, 1]`), once their count matches its shape: the checks of a request however read.
fn text_input(
    datatype: &str,
    shape: &[i64],
    read: impl FnOnce() -> Result<Vec<String>, OipError>,
) -> Result<(Vec<String>, bool), OipError> {
    check_tensor(datatype, shape)?;
    let texts = read()?;
    let column = check_count(shape, texts.len())?;
    Ok((texts, column))
}

fn check_tensor(datatype: &str, shape: &[i64]) -> Result<(), OipError> {
    if datatype != "BYTES" {
        return Err(OipError::invalid(format!("input \"text\" is BYTES, not {datatype}")));
    }
    match shape {
        [n] | [n, 1] if *n >= 0 => Ok(()),
        _ => Err(OipError::invalid(format!("input \"text\" has shape [N] or [N, 1], not {shape:?}"))),
    }
}

/// Whether the shape is `[N, 1]`, once the element count matches it.
fn check_count(shape: &[i64], count: usize) -> Result<bool, OipError> {
    if shape[0] as usize != count {
        return Err(OipError::invalid(format!("input \"text\" has shape {shape:?} but {count} elements")));
    }
    if count == 0 {
        return Err(OipError::invalid("input \"text\" is empty"));
    }
    Ok(shape.len() == 2)
}

fn outputs<'a>(names: impl Iterator<Item = &'a str>) -> Result<Vec<Output>, OipError> {
    let mut out = Vec::new();
    for name in names {
        let o = Output::parse(name)?;
        if !out.contains(&o) {
            out.push(o);
        }
    }
    if out.is_empty() {
        out.extend(Output::DEFAULT);
    }
    Ok(out)
}

/// A JSON tensor's strings, row-major (flat or nested arrays), moved out.
fn flatten(v: Value, out: &mut Vec<String>) -> Result<(), OipError> {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.into_iter().try_for_each(|i| flatten(i, out))?,
        other => return Err(OipError::invalid(format!("input \"text\" holds strings, not {other}"))),
    }
    Ok(())
}

fn utf8(b: Vec<u8>) -> Result<String, OipError> {
    String::from_utf8(b).map_err(|_| OipError::invalid("input \"text\" is not valid UTF-8"))
}

/// A BYTES tensor's raw contents: each element a 4-byte little-endian length and its bytes.
pub fn decode_raw_bytes(mut raw: &[u8]) -> Result<Vec<String>, OipError> {
    let mut out = Vec::new();
    while !raw.is_empty() {
        let Some((len, rest)) = raw.split_first_chunk::<4>() else {
            return Err(OipError::invalid("raw BYTES contents: a length cut short"));
        };
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return Err(OipError::invalid("raw BYTES contents: an element cut short"));
        }
        out.push(utf8(rest[..len].to_vec())?);
        raw = &rest[len..];
    }
    Ok(out)
}

/// Encodes strings as a BYTES tensor's raw contents.
pub fn encode_raw_bytes<'a>(items: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let mut out = Vec::new();
    for s in items {
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests;
