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
    ///
    /// Read first as the request it usually is, without a JSON value built for its data or
    /// its parameters ([`fast`]); a body that reading refuses is read again as an
    /// [`InferRequest`], the refusal's words [`InferCall::from_rest`]'s.
    pub fn from_json(body: &[u8]) -> Result<Self, OipError> {
        if let Ok(req) = serde_json::from_slice::<fast::Request<'_>>(body) {
            return Self::from_fast(req);
        }
        let req: InferRequest =
            serde_json::from_slice(body).map_err(|e| OipError::invalid(format!("not an inference request: {e}")))?;
        Self::from_rest(req)
    }

    /// [`InferCall::from_rest`]'s checks, in its order, on a request read by [`fast`].
    fn from_fast(req: fast::Request<'_>) -> Result<Self, OipError> {
        let outputs = outputs(req.outputs.iter().flatten().map(|o| o.name.as_ref()))?;
        let input = one_input(req.inputs, |i| i.name.as_ref())?;
        let (texts, column) = text_input(&input.datatype, &input.shape, || Ok(input.data.0))?;
        Ok(Self { id: req.id.filter(|id| !id.is_empty()), texts, column, outputs })
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

    /// A `ModelInferRequest`'s encoded bytes, read in place as the request usually comes
    /// ([`fast_pb`]): its model's name and version, borrowed from `msg`, and the call or why it
    /// is refused, as [`InferCall::from_pb`] reads and checks it. `None` when that reading
    /// refuses `msg`: decode it with prost then, which takes or refuses it (and words why).
    pub fn from_pb_bytes(msg: &[u8]) -> Option<PbCall<'_>> {
        let r = fast_pb::read(msg)?;
        let call = input_named(r.input.name).and_then(|()| {
            let (texts, column) = text_input(r.input.datatype, &r.input.shape, || match r.raw {
                Some(raw) => decode_raw_bytes(raw),
                None => Err(OipError::invalid("input \"text\" has no contents")),
            })?;
            let outputs = outputs(r.outputs.iter().copied())?;
            Ok(Self { id: Some(r.id).filter(|id| !id.is_empty()).map(str::to_owned), texts, column, outputs })
        });
        Some(PbCall { model_name: r.model_name, model_version: r.model_version, call })
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

    /// [`InferCall::to_rest`] written as JSON: the same bytes as `serde_json::to_vec(&to_rest())`,
    /// written directly (the gateway's gRPC path).
    pub fn rest_json(&self) -> Vec<u8> {
        let text_bytes: usize = self.texts.iter().map(|t| t.len() + 3).sum();
        let mut out = Vec::with_capacity(128 + text_bytes);
        let string = |out: &mut Vec<u8>, s: &str| {
            serde_json::to_writer(out, s).expect("a string is JSON");
        };
        out.push(b'{');
        if let Some(id) = &self.id {
            out.extend_from_slice(b"\"id\":");
            string(&mut out, id);
            out.push(b',');
        }
        out.extend_from_slice(b"\"inputs\":[{\"name\":");
        string(&mut out, INPUT);
        out.extend_from_slice(b",\"shape\":");
        serde_json::to_writer(&mut out, &self.shape()).expect("numbers are JSON");
        out.extend_from_slice(b",\"datatype\":\"BYTES\",\"data\":");
        serde_json::to_writer(&mut out, &self.texts).expect("strings are JSON");
        out.extend_from_slice(b"}],\"outputs\":[");
        for (i, o) in self.outputs.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"name\":");
            string(&mut out, o.name());
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
        out
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

/// A gRPC inference's model and call, read from its encoded message by
/// [`InferCall::from_pb_bytes`].
#[derive(Debug, PartialEq)]
pub struct PbCall<'a> {
    pub model_name: &'a str,
    pub model_version: &'a str,
    pub call: Result<InferCall, OipError>,
}

mod fast_pb;

/// An inference request as it usually comes, read without intermediate JSON values: names
/// borrowed from the body where they need no unescaping, the data's strings straight into the
/// texts, parameters skipped (checked to be objects, as [`InferRequest`] has them). Whatever it
/// refuses, [`InferRequest`] reads again (and words the refusal).
mod fast {
    use std::borrow::Cow;
    use std::fmt;

    use serde::Deserialize;
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

    #[derive(Deserialize)]
    pub(super) struct Request<'a> {
        #[serde(default)]
        pub(super) id: Option<String>,
        #[serde(default, rename = "parameters")]
        _parameters: Option<Object>,
        #[serde(borrow)]
        pub(super) inputs: Vec<Input<'a>>,
        #[serde(default, borrow)]
        pub(super) outputs: Option<Vec<Requested<'a>>>,
    }

    #[derive(Deserialize)]
    pub(super) struct Input<'a> {
        #[serde(borrow)]
        pub(super) name: Cow<'a, str>,
        pub(super) shape: Vec<i64>,
        #[serde(borrow)]
        pub(super) datatype: Cow<'a, str>,
        #[serde(default, rename = "parameters")]
        _parameters: Option<Object>,
        pub(super) data: Texts,
    }

    #[derive(Deserialize)]
    pub(super) struct Requested<'a> {
        #[serde(borrow)]
        pub(super) name: Cow<'a, str>,
        #[serde(default, rename = "parameters")]
        _parameters: Option<Object>,
    }

    /// A JSON object, skipped.
    struct Object;

    impl<'de> Deserialize<'de> for Object {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Object;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object, A::Error> {
                    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(Object)
                }
            }
            d.deserialize_map(V)
        }
    }

    /// A tensor's strings, row-major: a string, or an array of strings or of such arrays.
    pub(super) struct Texts(pub(super) Vec<String>);

    impl<'de> Deserialize<'de> for Texts {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let mut texts = Vec::new();
            Flatten(&mut texts).deserialize(d)?;
            Ok(Texts(texts))
        }
    }

    /// Pushes the strings of one JSON value onto its vector.
    struct Flatten<'v>(&'v mut Vec<String>);

    impl<'de> DeserializeSeed<'de> for Flatten<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Flatten<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("strings")
        }
        fn visit_str<E>(self, s: &str) -> Result<(), E> {
            self.0.push(s.to_owned());
            Ok(())
        }
        fn visit_string<E>(self, s: String) -> Result<(), E> {
            self.0.push(s);
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Flatten(&mut *self.0))?.is_some() {}
            Ok(())
        }
    }
}

/// The request's one input, `text`.
fn one_input<T>(inputs: Vec<T>, name: impl Fn(&T) -> &str) -> Result<T, OipError> {
    match <[T; 1]>::try_from(inputs) {
        Ok([one]) => input_named(name(&one)).map(|()| one),
        Err(inputs) => Err(OipError::invalid(format!("expected one input, \"text\"; got {}", inputs.len()))),
    }
}

fn input_named(name: &str) -> Result<(), OipError> {
    if name == INPUT {
        return Ok(());
    }
    Err(OipError::invalid(format!("unknown input {name:?}: the model's input is \"text\"")))
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
mod tests {
    use super::*;
    use crate::pb::InferTensorContents;
    use crate::pb::model_infer_request::InferRequestedOutputTensor;

    fn rest(body: serde_json::Value) -> Result<InferCall, OipError> {
        InferCall::from_json(body.to_string().as_bytes())
    }

    #[test]
    fn rest_requests_of_both_shapes() {
        let call = rest(serde_json::json!({
            "id": "r1", "parameters": {"anything": 1},
            "inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["play jazz", "book a table"]}]
        }))
        .unwrap();
        assert_eq!(call.texts, ["play jazz", "book a table"]);
        assert_eq!((call.id.as_deref(), call.column), (Some("r1"), false));
        assert_eq!(call.outputs, Output::DEFAULT);
        let call = rest(serde_json::json!({
            "inputs": [{"name": "text", "shape": [2, 1], "datatype": "BYTES", "data": [["a"], ["b"]]}],
            "outputs": [{"name": "logits"}, {"name": "label", "parameters": {"binary_data": false}}]
        }))
        .unwrap();
        assert_eq!((call.texts.len(), call.column, call.shape()), (2, true, vec![2, 1]));
        assert_eq!(call.outputs, [Output::Logits, Output::Label]);
        // Back to REST (the gateway's gRPC path) and parsed again: the same call.
        assert_eq!(InferCall::from_rest(call.to_rest()).unwrap(), call);
    }

    /// Triton's binary tensor data extension: the JSON, then the raw bytes.
    fn binary(header: serde_json::Value, raw: &[u8]) -> (Vec<u8>, usize) {
        let mut body = header.to_string().into_bytes();
        let len = body.len();
        body.extend_from_slice(raw);
        (body, len)
    }

    #[test]
    fn binary_tensor_data_reads_as_its_json_would() {
        let raw = encode_raw_bytes(["play jazz", "book a table"]);
        let header = |size: usize| {
            serde_json::json!({
                "id": "b1",
                "inputs": [{"name": "text", "shape": [2, 1], "datatype": "BYTES", "parameters": {"binary_data_size": size}}],
                "outputs": [{"name": "label", "parameters": {"binary_data": true}}]
            })
        };
        let (body, len) = binary(header(raw.len()), &raw);
        let call = InferCall::from_binary(&body, len).unwrap();
        assert_eq!(call.texts, ["play jazz", "book a table"]);
        assert_eq!(
            (call.id.as_deref(), call.column, call.outputs.as_slice()),
            (Some("b1"), true, [Output::Label].as_slice())
        );

        // An input in the JSON, no bytes after it: the usual request.
        let json = serde_json::json!({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hi"]}]});
        let (body, len) = binary(json, b"");
        assert_eq!(InferCall::from_binary(&body, len).unwrap().texts, ["hi"]);

        let refused = |body: &[u8], len: usize| InferCall::from_binary(body, len).unwrap_err().message;
        let (body, len) = binary(header(raw.len()), &raw);
        assert!(refused(&body, body.len() + 1).contains("Inference-Header-Content-Length is"), "longer than the body");
        assert!(refused(&body, len - 1).starts_with("not an inference request"), "cut inside the JSON");
        let (short, len) = binary(header(raw.len() + 3), &raw);
        assert!(
            refused(&short, len).contains("binary_data_size is 32 but 29 bytes follow"),
            "{}",
            refused(&short, len)
        );
        let (extra, len) = binary(header(raw.len()), &[raw.as_slice(), b"xy"].concat());
        assert!(refused(&extra, len).contains("2 bytes follow the JSON that no input"));
        let (body, len) = binary(header(raw.len() - 1), &raw[..raw.len() - 1]);
        assert_eq!(refused(&body, len), "raw BYTES contents: an element cut short");
        let mut h = header(raw.len());
        h["inputs"][0]["parameters"]["binary_data_size"] = serde_json::json!(-1);
        let (body, len) = binary(h, &raw);
        assert_eq!(refused(&body, len), "input \"text\": binary_data_size is not a size");
        let mut h = header(raw.len());
        h["inputs"][0]["shape"] = serde_json::json!([3]);
        let (body, len) = binary(h, &raw);
        assert_eq!(refused(&body, len), "input \"text\" has shape [3] but 2 elements");
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        let input = |name: &str, shape: serde_json::Value, dt: &str, data: serde_json::Value| serde_json::json!({"inputs": [{"name": name, "shape": shape, "datatype": dt, "data": data}]});
        let cases = [
            (input("text", [2].into(), "BYTES", serde_json::json!(["a"])), "but 1 elements"),
            (input("text", [1].into(), "FP32", serde_json::json!([1.0])), "BYTES, not FP32"),
            (input("txt", [1].into(), "BYTES", serde_json::json!(["a"])), "unknown input"),
            (input("text", [1, 2].into(), "BYTES", serde_json::json!(["a", "b"])), "shape [N] or [N, 1]"),
            (input("text", [1].into(), "BYTES", serde_json::json!([3])), "holds strings"),
            (input("text", [0].into(), "BYTES", serde_json::json!([])), "empty"),
            (serde_json::json!({"inputs": []}), "expected one input"),
            (serde_json::json!({"input": []}), "not an inference request"),
            (serde_json::json!({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES"}]}), "has no data"),
        ];
        for (body, expected) in cases {
            let e = rest(body.clone()).unwrap_err();
            assert_eq!(e.error_type, wire::ErrorType::InvalidRequest);
            assert!(e.message.contains(expected), "{body}: {e}");
        }
        let mut body = input("text", [1].into(), "BYTES", serde_json::json!(["a"]));
        body["outputs"] = serde_json::json!([{"name": "probabilities"}]);
        assert!(rest(body).unwrap_err().message.contains("unknown output"));
    }

    /// The body read as an [`InferRequest`] first, as before the fast reading.
    fn slow(body: &str) -> Result<InferCall, OipError> {
        let req: InferRequest =
            serde_json::from_str(body).map_err(|e| OipError::invalid(format!("not an inference request: {e}")))?;
        InferCall::from_rest(req)
    }

    #[test]
    fn the_fast_reading_takes_what_the_full_one_takes_and_refuses_with_its_words() {
        let bodies = [
            // Taken by the fast reading.
            r#"{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["play jazz"]}]}"#,
            r#"{"id":"r\"1","parameters":{"a":[1,{"b":null}]},"inputs":[{"name":"te\u0078t","shape":[2,1],"datatype":"BYTES","parameters":{},"data":[["a\n"],["\ud83d\ude00"]]}],"outputs":[{"name":"score","parameters":{"binary_data":false}},{"name":"score"}],"extra":1}"#,
            r#"{"id":null,"parameters":null,"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":"one"}],"outputs":null}"#,
            r#"{"id":"","inputs":[{"name":"text","shape":[3],"datatype":"BYTES","data":[[["a"]],["b"],"c"]}],"outputs":[]}"#,
            // Read by both, refused by the checks.
            r#"{"inputs":[{"name":"text","shape":[2],"datatype":"BYTES","data":["a"]}]}"#,
            r#"{"inputs":[{"name":"txt","shape":[1],"datatype":"BYTES","data":["a"]}],"outputs":[{"name":"nope"}]}"#,
            r#"{"inputs":[{"name":"text","shape":[1],"datatype":"FP32","data":["a"]}]}"#,
            r#"{"inputs":[]}"#,
            // Refused by the fast reading: the full one words it.
            r#"{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":[3]}]}"#,
            r#"{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES"}]}"#,
            r#"{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":{"a":"b"}}]}"#,
            r#"{"parameters":[],"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}]}"#,
            r#"{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"],"parameters":3}]}"#,
            r#"{"id":"a","id":"b","inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}]}"#,
            r#"{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}]"#,
            r#"{"inputs":[{"name":"text","shape":["1"],"datatype":"BYTES","data":["a"]}]}"#,
            "not json",
        ];
        for body in bodies {
            assert_eq!(InferCall::from_json(body.as_bytes()), slow(body), "{body}");
        }
        // The usual request is the fast reading's, its names borrowed from the body.
        let req: fast::Request<'_> = serde_json::from_str(bodies[0]).unwrap();
        assert!(matches!(req.inputs[0].name, std::borrow::Cow::Borrowed("text")));
        assert_eq!(req.inputs[0].data.0, ["play jazz"]);
        assert!(serde_json::from_str::<fast::Request<'_>>(bodies[3]).is_ok());
        assert!(serde_json::from_str::<fast::Request<'_>>(bodies[8]).is_err());
    }

    #[test]
    fn the_written_rest_body_is_the_serialized_one_byte_for_byte() {
        for (id, column, outputs, texts) in [
            (Some("r"), false, &Output::DEFAULT[..], vec!["play jazz"]),
            (None, true, &Output::ALL[..], vec!["a \"b\"\n", "\u{1F600}", "c\\"]),
            (Some("\"x\""), false, &[Output::Logits][..], vec![""]),
        ] {
            let c = InferCall {
                id: id.map(str::to_owned),
                texts: texts.into_iter().map(str::to_owned).collect(),
                column,
                outputs: outputs.to_vec(),
            };
            let want = serde_json::to_vec(&c.to_rest()).unwrap();
            assert_eq!(String::from_utf8(c.rest_json()).unwrap(), String::from_utf8(want).unwrap());
            assert_eq!(InferCall::from_json(&c.rest_json()), Ok(c.clone()), "read back: the same call");
        }
    }

    #[test]
    fn grpc_requests_raw_or_typed() {
        let tensor = |contents| InferInputTensor {
            name: "text".into(),
            datatype: "BYTES".into(),
            shape: vec![2, 1],
            parameters: Default::default(),
            contents,
        };
        let raw = encode_raw_bytes(["play jazz", "ÉTÉ à Zürich"]);
        assert_eq!(decode_raw_bytes(&raw).unwrap(), ["play jazz", "ÉTÉ à Zürich"]);
        let req = ModelInferRequest {
            id: "x".into(),
            inputs: vec![tensor(None)],
            raw_input_contents: vec![raw],
            outputs: vec![InferRequestedOutputTensor { name: "score".into(), parameters: Default::default() }],
            ..Default::default()
        };
        let call = InferCall::from_pb(req).unwrap();
        assert_eq!((call.texts.len(), call.column, call.outputs.as_slice()), (2, true, &[Output::Score][..]));
        let typed = InferTensorContents { bytes_contents: vec![b"a".to_vec(), b"b".to_vec()], ..Default::default() };
        let req = ModelInferRequest { inputs: vec![tensor(Some(typed))], ..Default::default() };
        let call = InferCall::from_pb(req).unwrap();
        assert_eq!((call.texts, call.id), (vec!["a".to_owned(), "b".to_owned()], None));
        // Cut short, not UTF-8, no contents.
        assert!(decode_raw_bytes(&[5, 0, 0, 0, b'a']).is_err());
        assert!(decode_raw_bytes(&[1, 0]).is_err());
        assert!(decode_raw_bytes(&[1, 0, 0, 0, 0xff]).is_err());
        let req = ModelInferRequest { inputs: vec![tensor(None)], ..Default::default() };
        assert!(InferCall::from_pb(req).unwrap_err().message.contains("no contents"));
    }

    /// What prost's reading and [`InferCall::from_pb`] make of an encoded message.
    fn slow_pb(msg: &[u8]) -> Result<(String, String, Result<InferCall, OipError>), prost::DecodeError> {
        let mut r = <ModelInferRequest as prost::Message>::decode(msg)?;
        let (model, version) = (std::mem::take(&mut r.model_name), std::mem::take(&mut r.model_version));
        Ok((model, version, InferCall::from_pb(r)))
    }

    #[test]
    fn the_in_place_pb_reading_takes_what_prost_takes_and_leaves_it_the_rest() {
        use prost::Message;
        let input = |name: &str, datatype: &str, shape: Vec<i64>| InferInputTensor {
            name: name.into(),
            datatype: datatype.into(),
            shape,
            parameters: Default::default(),
            contents: None,
        };
        let output = |name: &str| InferRequestedOutputTensor { name: name.into(), parameters: Default::default() };
        let req = |inputs, raw: Vec<Vec<u8>>, outputs| ModelInferRequest {
            model_name: "snips-minilm-l6".into(),
            inputs,
            raw_input_contents: raw,
            outputs,
            ..Default::default()
        };
        let one = || vec![input("text", "BYTES", vec![1])];
        let jazz = || vec![encode_raw_bytes(["play jazz"])];
        let usual = req(one(), jazz(), vec![]).encode_to_vec();
        let param = || crate::pb::InferParameter {
            parameter_choice: Some(crate::pb::infer_parameter::ParameterChoice::BoolParam(true)),
        };
        let mut taken: Vec<Vec<u8>> = vec![
            usual.clone(),
            ModelInferRequest {
                model_version: "1".into(),
                id: "r\"1".into(),
                ..req(
                    vec![input("text", "BYTES", vec![2, 1])],
                    vec![encode_raw_bytes(["a", "ÉTÉ"]), b"ignored".to_vec()],
                    vec![output("score"), output("label"), output("score")],
                )
            }
            .encode_to_vec(),
            // Read, and refused by the checks as from_pb refuses them.
            req(vec![input("txt", "BYTES", vec![1])], jazz(), vec![]).encode_to_vec(),
            req(vec![input("text", "FP32", vec![1])], jazz(), vec![]).encode_to_vec(),
            req(vec![input("text", "BYTES", vec![2])], jazz(), vec![]).encode_to_vec(),
            req(vec![input("text", "BYTES", vec![1, 2])], jazz(), vec![]).encode_to_vec(),
            req(vec![input("text", "BYTES", vec![0])], vec![vec![]], vec![]).encode_to_vec(),
            req(one(), vec![], vec![]).encode_to_vec(),
            req(one(), vec![vec![9, 0, 0, 0, b'a']], vec![]).encode_to_vec(),
            req(one(), vec![vec![1, 0, 0, 0, 0xff]], vec![]).encode_to_vec(),
            req(one(), jazz(), vec![output("nope")]).encode_to_vec(),
            req(one(), jazz(), vec![output("")]).encode_to_vec(),
        ];
        // The shape unpacked (field 3 as varints, one each), which prost reads too.
        let mut unpacked = vec![0x2a, 12, 0x0a, 4];
        unpacked.extend_from_slice(b"text");
        unpacked.extend_from_slice(&[0x12, 5]);
        unpacked.extend_from_slice(b"BYTES");
        unpacked.extend_from_slice(&[0x18, 1]);
        unpacked[1] = (unpacked.len() - 2) as u8;
        prost::encoding::bytes::encode(7, &jazz()[0], &mut unpacked);
        taken.push(unpacked);
        for msg in &taken {
            let fast = InferCall::from_pb_bytes(msg).unwrap_or_else(|| panic!("refused by the fast reading: {msg:?}"));
            let (model, version, call) = slow_pb(msg).unwrap();
            assert_eq!((fast.model_name, fast.model_version, &fast.call), (model.as_str(), version.as_str(), &call));
        }
        let fast = InferCall::from_pb_bytes(&taken[1]).unwrap();
        assert_eq!((fast.model_version, fast.call.as_ref().unwrap().id.as_deref()), ("1", Some("r\"1")));
        assert_eq!(fast.call.unwrap().texts, ["a", "ÉTÉ"]);
        assert_eq!(InferCall::from_pb_bytes(&taken[12]).unwrap().call.unwrap().texts, ["play jazz"]);

        // Left to prost, which takes them or words the refusal.
        let mut with_params = req(one(), jazz(), vec![]);
        with_params.parameters.insert("priority".into(), param());
        let mut input_params = req(one(), jazz(), vec![]);
        input_params.inputs[0].parameters.insert("binary_data".into(), param());
        let mut typed = req(one(), vec![], vec![]);
        typed.inputs[0].contents =
            Some(InferTensorContents { bytes_contents: vec![b"play jazz".to_vec()], ..Default::default() });
        let mut twice = usual.clone();
        prost::encoding::string::encode(1, &"other".to_owned(), &mut twice);
        let mut unknown = usual.clone();
        prost::encoding::string::encode(9, &"x".to_owned(), &mut unknown);
        let mut not_utf8 = vec![0x0a, 2, 0xc3, 0x28];
        not_utf8.extend_from_slice(&usual);
        let left: Vec<Vec<u8>> = vec![
            with_params.encode_to_vec(),
            input_params.encode_to_vec(),
            typed.encode_to_vec(),
            req(vec![], jazz(), vec![]).encode_to_vec(),
            req(vec![input("text", "BYTES", vec![1]), input("text", "BYTES", vec![1])], jazz(), vec![]).encode_to_vec(),
            twice,
            unknown,
            not_utf8,
            usual[..usual.len() - 3].to_vec(),
            vec![0x08, 1],
            vec![0x00],
        ];
        for msg in &left {
            assert!(InferCall::from_pb_bytes(msg).is_none(), "taken by the fast reading: {msg:?}");
        }
        // What prost makes of them: two taken, the others refused by the checks or the decoder.
        let (model, _, call) = slow_pb(&left[0]).unwrap();
        assert_eq!((model.as_str(), call.unwrap().texts), ("snips-minilm-l6", vec!["play jazz".to_owned()]));
        assert_eq!(slow_pb(&left[2]).unwrap().2.unwrap().texts, ["play jazz"]);
        assert!(slow_pb(&left[3]).unwrap().2.unwrap_err().message.contains("got 0"));
        assert!(slow_pb(&left[4]).unwrap().2.unwrap_err().message.contains("got 2"));
        assert_eq!(slow_pb(&left[5]).unwrap().0, "other", "prost keeps a field's last value");
        assert!(slow_pb(&left[6]).unwrap().2.is_ok(), "an unknown field is skipped");
        for i in [7, 8, 9, 10] {
            assert!(slow_pb(&left[i]).is_err(), "{i}: not a message prost reads");
        }
    }
}
