//! A Hugging Face-style sequence-classifier directory: an ONNX file, `tokenizer.json`, and a
//! `config.json` whose `id2label` names the classes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tokenizers::{Tokenizer, TruncationParams};
use wordpiece::Encoder;

/// Tokens kept when neither the tokenizer nor `config.json` sets a limit.
const DEFAULT_MAX_TOKENS: usize = 512;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("model directory {0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("{0}: {1}")]
    Config(PathBuf, String),
    #[error("tokenizer {0}: {1}")]
    Tokenizer(PathBuf, String),
    #[error("model directory {0}: {1}")]
    ModelFile(PathBuf, String),
}

/// What a model directory holds, loaded and checked.
pub struct ModelDir {
    /// Directory name, e.g. `snips-minilm-l6`.
    pub name: String,
    /// The ONNX file to run.
    pub model_path: PathBuf,
    /// The tokenizer: the `wordpiece` crate's exact BERT WordPiece encoder where the
    /// `tokenizer.json` allows it (a microsecond and no allocation a query), `tokenizers` itself
    /// otherwise, with the same ids either way.
    pub encoder: Encoder,
    /// Class labels in output order.
    pub labels: Vec<String>,
    /// Tokens per query after truncation.
    pub max_tokens: usize,
}

impl std::fmt::Debug for ModelDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelDir")
            .field("name", &self.name)
            .field("model_path", &self.model_path)
            .field("labels", &self.labels)
            .field("max_tokens", &self.max_tokens)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct HfConfig {
    id2label: BTreeMap<String, String>,
    max_position_embeddings: Option<usize>,
}

impl ModelDir {
    /// Loads `dir`; `model_file` overrides the ONNX file's name.
    pub fn load(dir: &Path, model_file: Option<&str>) -> Result<Self, ModelError> {
        let name = dir
            .canonicalize()
            .map_err(|e| ModelError::Io(dir.to_owned(), e))?
            .file_name()
            .map_or_else(|| "model".to_owned(), |n| n.to_string_lossy().into_owned());
        let model_path = find_model_file(dir, model_file)?;

        let config_path = dir.join("config.json");
        let raw = std::fs::read(&config_path).map_err(|e| ModelError::Io(config_path.clone(), e))?;
        let config: HfConfig =
            serde_json::from_slice(&raw).map_err(|e| ModelError::Config(config_path.clone(), e.to_string()))?;
        let labels = labels_in_order(&config.id2label).map_err(|e| ModelError::Config(config_path.clone(), e))?;

        let tok_path = dir.join("tokenizer.json");
        let mut tokenizer =
            Tokenizer::from_file(&tok_path).map_err(|e| ModelError::Tokenizer(tok_path.clone(), e.to_string()))?;
        // The batcher pads; a tokenizer that pads too would waste the token budget.
        tokenizer.with_padding(None);
        let max_tokens = match tokenizer.get_truncation() {
            Some(t) => t.max_length,
            None => {
                let max_length = config.max_position_embeddings.unwrap_or(DEFAULT_MAX_TOKENS);
                tokenizer
                    .with_truncation(Some(TruncationParams { max_length, ..Default::default() }))
                    .map_err(|e| ModelError::Tokenizer(tok_path.clone(), e.to_string()))?;
                max_length
            }
        };
        // Made after padding and truncation are set: the conversion reads the final settings.
        let encoder = Encoder::new(tokenizer);
        match encoder.fallback_reason() {
            None => tracing::debug!("tokenizing with the wordpiece encoder"),
            Some(reason) => tracing::info!(%reason, "tokenizing with `tokenizers` (slower)"),
        }
        Ok(Self { name, model_path, encoder, labels, max_tokens })
    }
}

fn find_model_file(dir: &Path, model_file: Option<&str>) -> Result<PathBuf, ModelError> {
    if let Some(f) = model_file {
        let p = dir.join(f);
        return if p.is_file() { Ok(p) } else { Err(ModelError::ModelFile(dir.to_owned(), format!("no file {f}"))) };
    }
    let default = dir.join("model.onnx");
    if default.is_file() {
        return Ok(default);
    }
    let entries = std::fs::read_dir(dir).map_err(|e| ModelError::Io(dir.to_owned(), e))?;
    let mut onnx: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
        .collect();
    match onnx.len() {
        1 => Ok(onnx.remove(0)),
        0 => Err(ModelError::ModelFile(dir.to_owned(), "no .onnx file".into())),
        _ => Err(ModelError::ModelFile(
            dir.to_owned(),
            "several .onnx files and no model.onnx: pick one with --model-file".into(),
        )),
    }
}

/// `{"0": "A", "1": "B"}` -> `["A", "B"]`; the ids must be exactly `0..n`.
fn labels_in_order(id2label: &BTreeMap<String, String>) -> Result<Vec<String>, String> {
    let mut labels = vec![None; id2label.len()];
    for (id, label) in id2label {
        let i: usize = id.parse().map_err(|_| format!("id2label key {id:?} is not a number"))?;
        let slot = labels.get_mut(i).ok_or_else(|| format!("id2label ids must be 0..{}", id2label.len()))?;
        *slot = Some(label.clone());
    }
    let labels: Option<Vec<String>> = labels.into_iter().collect();
    match labels {
        Some(l) if !l.is_empty() => Ok(l),
        _ => Err("id2label is empty or has gaps".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn labels_follow_numeric_ids_not_string_order() {
        let ids: Vec<(String, String)> = (0..12).map(|i| (i.to_string(), format!("L{i}"))).collect();
        let m: BTreeMap<_, _> = ids.into_iter().collect();
        let labels = labels_in_order(&m).unwrap();
        assert_eq!(labels[2], "L2");
        assert_eq!(labels[10], "L10");
    }

    #[test]
    fn bad_label_maps_are_refused() {
        assert!(labels_in_order(&map(&[("0", "a"), ("2", "b")])).is_err());
        assert!(labels_in_order(&map(&[("x", "a")])).is_err());
        assert!(labels_in_order(&map(&[])).is_err());
    }
}
