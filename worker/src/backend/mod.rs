//! The inference backend: a small synchronous trait, run on its own OS thread.

pub mod ort;
pub mod runner;

pub use self::ort::OrtBackend;
pub use runner::{BackendHandle, spawn};

/// A padded batch of token ids, row-major, every row `seq_len` long.
#[derive(Debug, Clone, PartialEq)]
pub struct InputBatch {
    pub rows: usize,
    pub seq_len: usize,
    pub input_ids: Vec<i64>,
    pub attention_mask: Vec<i64>,
    pub token_type_ids: Vec<i64>,
}

impl InputBatch {
    /// Pads each `(ids, type_ids)` row to the longest; padding is id 0 with mask 0.
    pub fn pad<'a>(rows: impl IntoIterator<Item = (&'a [i64], &'a [i64])> + Clone) -> Self {
        let seq_len = rows.clone().into_iter().map(|(ids, _)| ids.len()).max().unwrap_or(0);
        let mut batch = Self { rows: 0, seq_len, input_ids: vec![], attention_mask: vec![], token_type_ids: vec![] };
        for (ids, types) in rows {
            let pad = seq_len - ids.len();
            batch.input_ids.extend(ids.iter().copied().chain(std::iter::repeat_n(0, pad)));
            batch.attention_mask.extend(std::iter::repeat_n(1, ids.len()).chain(std::iter::repeat_n(0, pad)));
            batch.token_type_ids.extend(types.iter().copied().chain(std::iter::repeat_n(0, pad)));
            batch.rows += 1;
        }
        batch
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum BackendError {
    #[error("ONNX Runtime library: {0}")]
    Library(String),
    #[error("loading the model: {0}")]
    Load(String),
    #[error("execution provider: {0}")]
    ExecutionProvider(String),
    #[error("inference: {0}")]
    Inference(String),
}

/// Runs batches. Implementations are driven from one thread and need not be `Sync`.
pub trait Backend: Send + 'static {
    /// Class scores (logits) for each row, each `num_labels` long.
    fn infer(&mut self, batch: &InputBatch) -> Result<Vec<Vec<f32>>, BackendError>;
}

/// Turns logits into probabilities.
pub fn softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = logits.iter().map(|x| (x - max).exp()).collect();
    let sum: f32 = exp.iter().sum();
    exp.into_iter().map(|e| e / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_rows_to_the_longest() {
        let a = ([101, 7, 102], [0, 0, 0]);
        let b = ([101, 102], [0, 0]);
        let batch = InputBatch::pad([(&a.0[..], &a.1[..]), (&b.0[..], &b.1[..])]);
        assert_eq!(batch.rows, 2);
        assert_eq!(batch.seq_len, 3);
        assert_eq!(batch.input_ids, [101, 7, 102, 101, 102, 0]);
        assert_eq!(batch.attention_mask, [1, 1, 1, 1, 1, 0]);
    }

    #[test]
    fn softmax_sums_to_one_and_keeps_order() {
        let p = softmax(&[1.0, 3.0, 2.0]);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(p[1] > p[2] && p[2] > p[0]);
        let big = softmax(&[1000.0, 0.0]);
        assert!(big[0].is_finite() && big[0] > 0.99);
    }
}
