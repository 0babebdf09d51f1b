//! The inference backend: a small synchronous trait and its implementations. A leaf: nothing
//! here knows about queues, batching or HTTP (the thread that drives a backend is
//! `batching::runner`).

pub mod fake;
pub mod ort;

pub use self::fake::FakeBackend;
pub use self::ort::OrtBackend;

/// Where inference runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(u32),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cpu => f.write_str("cpu"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

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
    /// The token ids, attention mask and token types, in that order.
    pub fn columns(&self) -> [&[i64]; 3] {
        [&self.input_ids, &self.attention_mask, &self.token_type_ids]
    }

    /// Pads each `(ids, type_ids)` row to the longest; padding is id 0 with mask 0.
    pub fn pad<'a>(rows: impl IntoIterator<Item = (&'a [i64], &'a [i64])> + Clone) -> Self {
        Self::pad_to(rows, |r, s| (r, s))
    }

    /// Pads to the shape `shape(rows, longest)` returns (never smaller than the data); extra rows
    /// are all padding, and their outputs are to be ignored.
    pub fn pad_to<'a>(
        rows: impl IntoIterator<Item = (&'a [i64], &'a [i64])> + Clone,
        shape: impl FnOnce(usize, usize) -> (usize, usize),
    ) -> Self {
        let count = rows.clone().into_iter().count();
        let longest = rows.clone().into_iter().map(|(ids, _)| ids.len()).max().unwrap_or(0);
        let (target_rows, seq_len) = shape(count, longest);
        let (target_rows, seq_len) = (target_rows.max(count), seq_len.max(longest));
        let cells = target_rows * seq_len;
        let mut batch = Self {
            rows: target_rows,
            seq_len,
            input_ids: Vec::with_capacity(cells),
            attention_mask: Vec::with_capacity(cells),
            token_type_ids: Vec::with_capacity(cells),
        };
        for (ids, types) in rows {
            let pad = seq_len - ids.len();
            batch.input_ids.extend(ids.iter().copied().chain(std::iter::repeat_n(0, pad)));
            batch.attention_mask.extend(std::iter::repeat_n(1, ids.len()).chain(std::iter::repeat_n(0, pad)));
            batch.token_type_ids.extend(types.iter().copied().chain(std::iter::repeat_n(0, pad)));
        }
        batch.input_ids.resize(cells, 0);
        batch.attention_mask.resize(cells, 0);
        batch.token_type_ids.resize(cells, 0);
        batch
    }
}

/// Rounds batch shapes up to a few buckets: rows to a power of two, sequence length to a multiple
/// of 16, within the limits. ONNX Runtime's CUDA provider pays far more CPU time for a batch
/// the first time it meets its shape than once shapes repeat, so a GPU worker runs a bounded set
/// of shapes, all warmed up at start. A CPU worker runs exact shapes: padding there costs arithmetic, not launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShapeBuckets {
    pub max_rows: usize,
    pub max_seq: usize,
}

/// Sequence lengths are padded to a multiple of this on a GPU.
const SEQ_STEP: usize = 16;

impl ShapeBuckets {
    pub fn shape(&self, rows: usize, seq: usize) -> (usize, usize) {
        let r = rows.next_power_of_two().min(self.max_rows).max(rows);
        let s = seq.div_ceil(SEQ_STEP).saturating_mul(SEQ_STEP).min(self.max_seq).max(seq);
        (r, s)
    }

    /// Every shape [`shape`](Self::shape) can return for batches within `max_tokens`.
    pub fn all(&self, max_tokens: usize) -> Vec<(usize, usize)> {
        let mut rows: Vec<usize> = std::iter::successors(Some(1usize), |r| r.checked_mul(2))
            .take_while(|&r| r < self.max_rows)
            .chain([self.max_rows])
            .collect();
        rows.dedup();
        let mut seqs: Vec<usize> =
            (1..).map(|k| k * SEQ_STEP).take_while(|&s| s < self.max_seq).chain([self.max_seq]).collect();
        seqs.dedup();
        let mut shapes = Vec::new();
        for &r in &rows {
            for &s in &seqs {
                if r == 1 || r * s <= max_tokens.max(s) {
                    shapes.push((r, s));
                }
            }
        }
        shapes
    }
}

impl ShapeBuckets {
    /// The shapes of full batches: for each sequence length, the most rows within `max_tokens`.
    /// What a saturated worker (its calibration, full load) runs.
    pub fn full(&self, max_tokens: usize) -> Vec<(usize, usize)> {
        let mut full: Vec<(usize, usize)> = Vec::new();
        for (rows, seq) in self.all(max_tokens) {
            match full.iter_mut().find(|(_, s)| *s == seq) {
                Some(shape) => shape.0 = shape.0.max(rows),
                None => full.push((rows, seq)),
            }
        }
        full
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

    /// The shape to pad a batch of `rows` rows, the longest `seq` tokens, to.
    fn padded_shape(&self, rows: usize, seq: usize) -> (usize, usize) {
        (rows, seq)
    }

    /// Work done once, on the backend's thread, after it is made and before it takes batches
    /// (running the shapes of full batches once, say). A worker serves once one session of each
    /// lane has done it; the others join when they have.
    fn warm_up(&mut self) -> Result<(), BackendError> {
        Ok(())
    }
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
    fn pads_to_a_bucketed_shape_with_empty_rows() {
        let a = ([101, 7, 102], [0, 0, 0]);
        let batch = InputBatch::pad_to([(&a.0[..], &a.1[..])], |_, _| (2, 4));
        assert_eq!((batch.rows, batch.seq_len), (2, 4));
        assert_eq!(batch.input_ids, [101, 7, 102, 0, 0, 0, 0, 0]);
        assert_eq!(batch.attention_mask, [1, 1, 1, 0, 0, 0, 0, 0]);
        // A shape smaller than the data is never used.
        let batch = InputBatch::pad_to([(&a.0[..], &a.1[..])], |_, _| (0, 1));
        assert_eq!((batch.rows, batch.seq_len), (1, 3));
    }

    #[test]
    fn buckets_round_up_within_limits() {
        let b = ShapeBuckets { max_rows: 256, max_seq: 128 };
        assert_eq!(b.shape(1, 5), (1, 16));
        assert_eq!(b.shape(3, 16), (4, 16));
        assert_eq!(b.shape(33, 17), (64, 32));
        assert_eq!(b.shape(200, 120), (256, 128));
        let odd = ShapeBuckets { max_rows: 48, max_seq: 100 };
        assert_eq!(odd.shape(40, 99), (48, 100));
        // Every bucketed shape is among those warmed up.
        let all = b.all(256 * 128);
        for rows in 1..=256 {
            for seq in [1, 15, 16, 17, 64, 127, 128] {
                assert!(all.contains(&b.shape(rows, seq)), "{rows}x{seq}");
            }
        }
        assert_eq!(all.len(), 9 * 8);
        // The GPU's defaults: 256 rows up to 64 tokens, then 128 within 16384 tokens.
        let full = b.full(16384);
        let want = [(256, 16), (256, 32), (256, 48), (256, 64), (128, 80), (128, 96), (128, 112), (128, 128)];
        assert_eq!(full, want);
        assert!(full.iter().all(|s| b.all(16384).contains(s)));
    }
}
