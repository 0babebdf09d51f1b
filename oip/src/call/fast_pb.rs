//! A `ModelInferRequest` as it usually comes (raw contents, no parameters), read in place with
//! prost's wire-format primitives: its names borrowed from the message, no message structs, maps
//! or strings built for it. Anything else it refuses (`None`): a field it does not expect (the
//! parameters, typed contents, a field unknown to the spec), a string or message field given
//! twice, a field of the wrong wire type, bytes that are not a message. The caller then decodes
//! the message with prost ([`ModelInferRequest`](crate::pb::ModelInferRequest)), which takes or
//! refuses it and words any refusal, so this reading changes no answer, only its cost.

use prost::encoding::{WireType, decode_key, decode_varint};

/// The fields of a request that [`InferCall::from_pb`](super::InferCall::from_pb) reads.
pub(super) struct Request<'a> {
    pub(super) model_name: &'a str,
    pub(super) model_version: &'a str,
    pub(super) id: &'a str,
    /// Its one input (a request with none or several is refused: prost's reading words it).
    pub(super) input: Input<'a>,
    /// The requested outputs' names, in order.
    pub(super) outputs: Vec<&'a str>,
    /// The first of `raw_input_contents`.
    pub(super) raw: Option<&'a [u8]>,
}

pub(super) struct Input<'a> {
    pub(super) name: &'a str,
    pub(super) datatype: &'a str,
    pub(super) shape: Vec<i64>,
}

/// `msg` read, or `None` where prost's reading must decide (see the module's text).
pub(super) fn read(mut msg: &[u8]) -> Option<Request<'_>> {
    let (mut model_name, mut model_version, mut id, mut input, mut raw) = (None, None, None, None, None);
    let mut outputs = Vec::new();
    while !msg.is_empty() {
        let (tag, field) = length_delimited(&mut msg)?;
        match tag {
            1 => once(&mut model_name, text(field)?)?,
            2 => once(&mut model_version, text(field)?)?,
            3 => once(&mut id, text(field)?)?,
            5 => once(&mut input, read_input(field)?)?,
            6 => outputs.push(read_output(field)?),
            // Raw contents beyond the first are for inputs this model does not have; prost's
            // reading takes them and the checks look at the first alone, as here.
            7 => {
                raw.get_or_insert(field);
            }
            _ => return None,
        }
    }
    Some(Request {
        model_name: model_name.unwrap_or_default(),
        model_version: model_version.unwrap_or_default(),
        id: id.unwrap_or_default(),
        input: input?,
        outputs,
        raw,
    })
}

fn read_input(mut msg: &[u8]) -> Option<Input<'_>> {
    let (mut name, mut datatype) = (None, None);
    let mut shape = Vec::new();
    while !msg.is_empty() {
        let (tag, wire) = decode_key(&mut msg).ok()?;
        match (tag, wire) {
            (1, WireType::LengthDelimited) => once(&mut name, text(bytes(&mut msg)?)?)?,
            (2, WireType::LengthDelimited) => once(&mut datatype, text(bytes(&mut msg)?)?)?,
            // A repeated int64, packed (as proto3 writes it) or not (as prost also reads it).
            (3, WireType::LengthDelimited) => {
                let mut packed = bytes(&mut msg)?;
                while !packed.is_empty() {
                    shape.push(decode_varint(&mut packed).ok()? as i64);
                }
            }
            (3, WireType::Varint) => shape.push(decode_varint(&mut msg).ok()? as i64),
            _ => return None,
        }
    }
    Some(Input { name: name.unwrap_or_default(), datatype: datatype.unwrap_or_default(), shape })
}

fn read_output(mut msg: &[u8]) -> Option<&str> {
    let mut name = None;
    while !msg.is_empty() {
        let (tag, field) = length_delimited(&mut msg)?;
        match tag {
            1 => once(&mut name, text(field)?)?,
            _ => return None,
        }
    }
    Some(name.unwrap_or_default())
}

/// The next field of `msg`, of the length-delimited wire type: its tag and its bytes.
fn length_delimited<'a>(msg: &mut &'a [u8]) -> Option<(u32, &'a [u8])> {
    match decode_key(msg).ok()? {
        (tag, WireType::LengthDelimited) => Some((tag, bytes(msg)?)),
        _ => None,
    }
}

/// A length-delimited field's bytes (its length read already as the key's).
fn bytes<'a>(msg: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(decode_varint(msg).ok()?).ok()?;
    let (field, rest) = msg.split_at_checked(len)?;
    *msg = rest;
    Some(field)
}

fn text(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok()
}

/// Sets a field seen once; a second time (prost keeps the last) is left to prost's reading.
fn once<T>(slot: &mut Option<T>, v: T) -> Option<()> {
    match slot {
        Some(_) => None,
        None => {
            *slot = Some(v);
            Some(())
        }
    }
}
