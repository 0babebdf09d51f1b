//! Counters and histograms that many threads write at once without meeting on one cache line:
//! each thread writes its own shard (cache-padded atomics); a scrape adds the shards up.
//!
//! prometheus-client's `Histogram` takes a lock on every observation, and its `Counter` is one
//! atomic that every core writes: under load on many runtime threads that line moves between
//! cores on every request. These encode exactly as theirs do (a test compares the
//! text), so a series keeps its name, type and buckets when a metric moves here.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Shards per metric: more than the threads that write on a hot path (the runtime's, the backend's).
pub const SHARDS: usize = 16;

/// The calling thread's shard: threads take shards in turn as they first write.
pub fn index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    INDEX.with(|i| *i)
}

/// A monotonic counter, sharded. Clones share the count.
#[derive(Debug, Clone, Default)]
pub struct Counter {
    shards: Arc<[CachePadded<AtomicU64>; SHARDS]>,
}

impl Counter {
    pub fn inc(&self) {
        self.inc_by(1);
    }

    pub fn inc_by(&self, n: u64) {
        self.shards[index()].fetch_add(n, Ordering::Relaxed);
    }

    /// The count: the shards' sum.
    pub fn get(&self) -> u64 {
        self.shards.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }
}

impl TypedMetric for Counter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for Counter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A gauge that goes up and down, sharded: each thread adds to its own shard (a shard alone may
/// go negative when a value is taken on one thread and given back on another); a scrape adds
/// them up. Clones share the value.
#[derive(Debug, Clone, Default)]
pub struct Gauge {
    shards: Arc<[CachePadded<AtomicI64>; SHARDS]>,
}

impl Gauge {
    pub fn inc(&self) {
        self.inc_by(1);
    }

    pub fn dec(&self) {
        self.dec_by(1);
    }

    pub fn inc_by(&self, n: i64) {
        self.shards[index()].fetch_add(n, Ordering::Relaxed);
    }

    pub fn dec_by(&self, n: i64) {
        self.shards[index()].fetch_sub(n, Ordering::Relaxed);
    }

    /// The value: the shards' sum.
    pub fn get(&self) -> i64 {
        self.shards.iter().map(|s| s.load(Ordering::Relaxed)).fold(0i64, i64::wrapping_add)
    }
}

impl TypedMetric for Gauge {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for Gauge {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.get())
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A histogram with fixed upper bounds, sharded. Clones share the counts.
#[derive(Debug, Clone)]
pub struct Histogram {
    inner: Arc<HistogramInner>,
}

#[derive(Debug)]
struct HistogramInner {
    /// Upper bounds, ascending, the last `+Inf`, as prometheus-client keeps them.
    bounds: Box<[f64]>,
    shards: Box<[CachePadded<HistogramShard>]>,
}

#[derive(Debug)]
struct HistogramShard {
    /// Per bucket, not cumulative.
    counts: Box<[AtomicU64]>,
    /// The sum's `f64` bits.
    sum: AtomicU64,
}

impl Histogram {
    /// Buckets with these upper bounds, and `+Inf`.
    pub fn new(bounds: impl IntoIterator<Item = f64>) -> Self {
        let bounds: Box<[f64]> = bounds.into_iter().chain(std::iter::once(f64::INFINITY)).collect();
        let shard = || {
            CachePadded::new(HistogramShard {
                counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
                sum: AtomicU64::new(0f64.to_bits()),
            })
        };
        let shards = (0..SHARDS).map(|_| shard()).collect();
        Self { inner: Arc::new(HistogramInner { bounds, shards }) }
    }

    pub fn observe(&self, v: f64) {
        let inner = &*self.inner;
        // The first bucket whose bound is at least `v`; NaN in `+Inf`, as prometheus-client does.
        let last = inner.bounds.len() - 1;
        let bucket = if v.is_nan() { last } else { inner.bounds.partition_point(|&b| b < v).min(last) };
        let shard = &inner.shards[index()];
        shard.counts[bucket].fetch_add(1, Ordering::Relaxed);
        // Written by this thread's shard alone, but for threads sharing it: no lost update.
        let _ =
            shard.sum.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| Some((f64::from_bits(s) + v).to_bits()));
    }

    /// Sum, count and per-bucket counts (not cumulative), over every shard.
    fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let inner = &*self.inner;
        let mut buckets: Vec<(f64, u64)> = inner.bounds.iter().map(|&b| (b, 0)).collect();
        let mut sum = 0.0;
        for shard in inner.shards.iter() {
            for (bucket, count) in buckets.iter_mut().zip(shard.counts.iter()) {
                bucket.1 += count.load(Ordering::Relaxed);
            }
            sum += f64::from_bits(shard.sum.load(Ordering::Relaxed));
        }
        let count = buckets.iter().map(|b| b.1).sum();
        (sum, count, buckets)
    }
}

impl TypedMetric for Histogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::counter::Counter as PlainCounter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::histogram::{Histogram as PlainHistogram, exponential_buckets};
    use prometheus_client::registry::Registry;

    use super::*;

    fn text(register: impl FnOnce(&mut Registry)) -> String {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    const VALUES: [f64; 9] = [0.00005, 0.0001, 0.00015, 0.003, 0.003, 0.2, 7.5, 1e9, f64::NAN];

    #[test]
    fn a_histogram_encodes_as_prometheus_clients_does() {
        let buckets = || exponential_buckets(1e-4, 2.0, 19);
        let (plain, sharded) = (PlainHistogram::new(buckets()), Histogram::new(buckets()));
        for v in VALUES.iter().filter(|v| !v.is_nan()) {
            plain.observe(*v);
            sharded.observe(*v);
        }
        let expected = text(|r| r.register("latency_seconds", "Latency", plain));
        assert_eq!(text(|r| r.register("latency_seconds", "Latency", sharded)), expected);
        assert!(expected.contains("latency_seconds_bucket{le=\"0.0001\"} 2"), "{expected}");
    }

    #[test]
    fn nan_lands_in_inf_as_prometheus_clients_does() {
        let (plain, sharded) = (PlainHistogram::new([1.0]), Histogram::new([1.0]));
        plain.observe(f64::NAN);
        sharded.observe(f64::NAN);
        let bucket = |t: String| t.lines().find(|l| l.contains("+Inf")).map(str::to_owned);
        let expected = bucket(text(|r| r.register("x", "x", plain)));
        assert_eq!(bucket(text(|r| r.register("x", "x", sharded))), expected);
        assert!(expected.is_some_and(|l| l.ends_with(" 1")));
    }

    #[test]
    fn a_counter_and_a_family_encode_as_prometheus_clients_do() {
        let (plain, sharded) = (PlainCounter::<u64>::default(), Counter::default());
        plain.inc_by(41);
        plain.inc();
        sharded.inc_by(41);
        sharded.inc();
        let expected = text(|r| r.register("requests", "Requests", plain));
        assert_eq!(text(|r| r.register("requests", "Requests", sharded)), expected);
        assert!(expected.contains("requests_total 42"), "{expected}");

        type Labels = Vec<(String, String)>;
        let plain = Family::<Labels, PlainHistogram>::new_with_constructor(|| PlainHistogram::new([0.1, 1.0]));
        let sharded = Family::<Labels, Histogram>::new_with_constructor(|| Histogram::new([0.1, 1.0]));
        let labels = vec![("outcome".to_owned(), "ok".to_owned())];
        plain.get_or_create(&labels).observe(0.5);
        sharded.get_or_create(&labels).observe(0.5);
        let expected = text(|r| r.register("d", "D", plain));
        assert_eq!(text(|r| r.register("d", "D", sharded)), expected);
    }

    #[test]
    fn a_gauge_encodes_as_prometheus_clients_does_and_sums_what_threads_move() {
        let (plain, sharded) = (prometheus_client::metrics::gauge::Gauge::<i64>::default(), Gauge::default());
        plain.set(7);
        sharded.inc_by(9);
        // Taken on one thread, given back on another: that shard goes negative, the sum holds.
        let moved = sharded.clone();
        std::thread::spawn(move || moved.dec_by(2)).join().unwrap();
        assert_eq!(sharded.get(), 7);
        let expected = text(|r| r.register("outstanding", "Held", plain));
        assert_eq!(text(|r| r.register("outstanding", "Held", sharded)), expected);
        assert!(expected.contains("outstanding 7"), "{expected}");
    }

    #[test]
    fn counts_from_many_threads_add_up() {
        let (counter, histogram) = (Counter::default(), Histogram::new([0.5]));
        std::thread::scope(|s| {
            for t in 0..24 {
                let (counter, histogram) = (counter.clone(), histogram.clone());
                s.spawn(move || {
                    for i in 0..10_000 {
                        counter.inc();
                        histogram.observe(if (t + i) % 2 == 0 { 0.25 } else { 1.0 });
                    }
                });
            }
        });
        assert_eq!(counter.get(), 240_000);
        let (sum, count, buckets) = histogram.snapshot();
        assert_eq!((count, buckets[0].1, buckets[1].1), (240_000, 120_000, 120_000));
        assert_eq!(sum, 120_000.0 * 1.25);
    }
}
