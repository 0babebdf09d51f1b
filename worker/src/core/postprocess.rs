//! From a row of logits to a [`Prediction`]: softmax, then the most likely label.

use std::collections::BTreeMap;

use wire::Prediction;

use super::Detail;

/// Turns logits into probabilities (in place of the logits).
pub fn softmax(logits: &mut [f32]) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for x in logits.iter_mut() {
        *x = (*x - max).exp();
        sum += *x;
    }
    for x in logits.iter_mut() {
        *x /= sum;
    }
}

/// The prediction for one query: the label of the highest probability and its score; every
/// label's probability too when `all_scores`, and the logits themselves when `logits`.
pub fn prediction(labels: &[String], mut logits: Vec<f32>, detail: Detail) -> Prediction {
    let raw = detail.logits.then(|| logits.clone());
    softmax(&mut logits);
    let (best, score) = logits.iter().copied().enumerate().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap_or((0, 0.0));
    let scores =
        detail.all_scores.then(|| labels.iter().cloned().zip(logits.iter().copied()).collect::<BTreeMap<_, _>>());
    Prediction { intent: labels[best].clone(), score, scores, logits: raw }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_sums_to_one_and_keeps_order() {
        let mut p = [1.0, 3.0, 2.0];
        softmax(&mut p);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(p[1] > p[2] && p[2] > p[0]);
        let mut big = [1000.0, 0.0];
        softmax(&mut big);
        assert!(big[0].is_finite() && big[0] > 0.99);
    }

    #[test]
    fn the_prediction_is_the_most_likely_label_with_its_probability() {
        let labels: Vec<String> = ["A", "B", "C"].map(String::from).to_vec();
        let p = prediction(&labels, vec![0.0, 2.0, 1.0], Detail::default());
        assert_eq!(p.intent, "B");
        let expected = 2f32.exp() / (1.0 + 2f32.exp() + 1f32.exp());
        assert!((p.score - expected).abs() < 1e-6, "{}", p.score);
        assert!(p.scores.is_none() && p.logits.is_none());
        let p = prediction(&labels, vec![5.0, 0.0, 0.0], Detail { all_scores: true, logits: true });
        assert_eq!(p.logits.as_deref(), Some(&[5.0, 0.0, 0.0][..]));
        assert_eq!(p.intent, "A");
        let scores = p.scores.unwrap();
        assert_eq!(scores.len(), 3);
        assert_eq!(scores["A"], p.score);
    }
}
