//! One run end to end: start the load threads, collect every interval, sample the gateway's
//! signal and follow the caller's series, show progress, and make the [`Summary`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::{Instant, MissedTickBehavior};

use crate::Error;
use crate::collect::Collector;
use crate::engine::{self, Load, Plan, Shared, Span};
use crate::progress::{Progress, View, When};
use crate::series::{self, Follower};
use crate::signal::{Sampler, Source};
use crate::stats::{Percentiles, spectrum};
use crate::summary::{PhaseSummary, SignalTrack, SpanInfo, Summary, TargetInfo};
use crate::target::Target;

/// A phase as planned.
#[derive(Debug, Clone)]
pub struct PhaseInfo {
    pub label: String,
    pub concurrency: Option<usize>,
    /// Open loop: where it lies in the profile (seconds) and its mean rate.
    pub span: Option<(f64, f64)>,
    pub rate: Option<f64>,
}

/// Everything about a run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub plan: Plan,
    pub target: Arc<Target>,
    pub target_info: TargetInfo,
    pub phases: Vec<PhaseInfo>,
    pub title: String,
    pub command: Vec<String>,
    pub profile_text: Option<String>,
    pub interval: Duration,
    pub signal: Option<Source>,
    pub signal_interval: Duration,
    pub series: Vec<PathBuf>,
    pub progress: When,
    pub json: bool,
    /// Stop after this long whatever the plan says (Ctrl-C does the same).
    pub deadline: Option<Duration>,
}

impl RunSpec {
    /// Expected length in seconds, when the plan fixes it.
    fn expected_length(&self) -> Option<f64> {
        match &self.plan.load {
            Load::Open { profile, requests: None, .. } => Some(profile.length()),
            Load::Open { .. } => None,
            Load::Closed(steps) => steps.iter().map(|s| s.duration.map(|d| (s.warmup + d).as_secs_f64())).sum(),
        }
    }
}

/// Run the load and make the summary.
pub async fn run(spec: RunSpec) -> Result<Summary, Error> {
    let started_unix = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let start = Instant::now();
    let shared = Shared::new(spec.plan.threads.max(1), start);
    let profile = match &spec.plan.load {
        Load::Open { profile, .. } => Some(profile.clone()),
        Load::Closed(_) => None,
    };
    let handles = engine::spawn(&spec.plan, spec.target.clone(), shared.clone()).map_err(Error::Io)?;
    let mut done = tokio::task::spawn_blocking(move || {
        for h in handles {
            let _ = h.join();
        }
    });

    let mut collector = Collector::new(shared.clone(), profile.clone(), spec.phases.len());
    let mut progress = Progress::new(spec.progress, spec.json, spec.expected_length(), spec.signal.is_some());
    let track = spec
        .signal
        .as_ref()
        .map(|s| Arc::new(Mutex::new(SignalTrack { url: s.url.clone(), pool: s.pool.clone(), ..Default::default() })));
    let sampling = spec
        .signal
        .clone()
        .zip(track.clone())
        .map(|(source, track)| tokio::spawn(sample(source, track, shared.clone(), spec.signal_interval)));
    let mut followers: Vec<Follower> = spec.series.iter().cloned().map(Follower::new).collect();
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let start_unix = started_unix.as_secs_f64();

    let mut ticker = tokio::time::interval_at(start + spec.interval, spec.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let deadline = spec.deadline.map(|d| start + d);
    let mut stopping = false;
    loop {
        tokio::select! {
            _ = &mut done => break,
            _ = ticker.tick() => {
                let now = Instant::now();
                collector.tick(now);
                for f in &mut followers {
                    f.poll(start_unix, &mut series);
                }
                show(&mut progress, &spec, &shared, &collector, track.as_deref(), &series);
                if !stopping && deadline.is_some_and(|d| now >= d) {
                    stopping = true;
                    shared.stop();
                }
            }
            r = tokio::signal::ctrl_c() => {
                if r.is_ok() {
                    if stopping {
                        progress.finish();
                        std::process::exit(130);
                    }
                    stopping = true;
                    shared.stop();
                    progress.message("stopping: waiting for the requests in flight (Ctrl-C again to quit at once)");
                }
            }
        }
    }
    let end = Instant::now();
    collector.tick(end);
    if let Some(h) = sampling {
        h.abort();
    }
    for f in &mut followers {
        f.poll(start_unix, &mut series);
    }
    if collector.timeline.last().is_some_and(|t| t.dt >= 0.05) {
        show(&mut progress, &spec, &shared, &collector, track.as_deref(), &series);
    }
    let track = track.map(|t| lock(&t).clone());
    progress.finish();
    let seconds = shared.seconds(end);
    let spans = shared.spans.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let skipped: u64 = followers.iter().map(|f| f.skipped).sum();
    let mut notes = Vec::new();
    if skipped > 0 {
        notes.push(format!("{skipped} line(s) of the --series files were not valid and were skipped"));
    }
    if let Some(t) = &track
        && t.failures > 0
    {
        notes.push(format!(
            "{} of {} signal readings failed; last: {}",
            t.failures,
            t.failures + t.samples.len() as u64,
            t.last_error.as_deref().unwrap_or("?")
        ));
    }
    if shared.stopped() {
        notes.push(format!("stopped early, after {seconds:.1} s"));
    }
    Ok(summarize(&spec, &collector, &spans, seconds, started_unix, track, series::clip(&series, seconds), notes))
}

/// The live line of the last timeline row.
fn show(
    progress: &mut Progress,
    spec: &RunSpec,
    shared: &Shared,
    collector: &Collector,
    track: Option<&Mutex<SignalTrack>>,
    series: &BTreeMap<String, Vec<(f64, f64)>>,
) {
    if !progress.is_on() {
        return;
    }
    let Some(tick) = collector.timeline.last() else { return };
    let latest = series::latest(series, tick.t);
    // The phase of the interval's middle: what the row is about.
    let phase = phase_label(spec, shared, tick.t - tick.dt / 2.0);
    let signal = track.and_then(|t| lock(t).samples.last().copied());
    progress.tick(&View {
        tick,
        phase: &phase,
        signal: signal.as_ref(),
        series: &latest,
        ok: collector.total.ok,
        failed: collector.total.failed(),
    });
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Read the gateway's signal every `every` until aborted.
async fn sample(source: Source, track: Arc<Mutex<SignalTrack>>, shared: Arc<Shared>, every: Duration) {
    let mut sampler = Sampler::new(source, every.max(Duration::from_millis(200)));
    let mut ticker = tokio::time::interval_at(shared.start, every);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let t = shared.seconds(Instant::now());
        let reading = sampler.sample(t).await;
        let mut track = lock(&track);
        match reading {
            Ok(sample) => track.samples.push(sample),
            Err(e) => {
                track.failures += 1;
                track.last_error = Some(e);
            }
        }
    }
}

/// The phase being run at `t` seconds, for the live display.
fn phase_label(spec: &RunSpec, shared: &Shared, t: f64) -> String {
    match &spec.plan.load {
        Load::Open { profile, warmup_phase, .. } => match profile.phase_at(t) {
            Some(i) => match Load::open_phase(*warmup_phase, i) {
                None => "warm-up".to_owned(),
                Some(p) => spec.phases.get(p as usize).map_or_else(String::new, |ph| ph.label.clone()),
            },
            None => "draining".to_owned(),
        },
        Load::Closed(_) => {
            let spans = shared.spans.lock().unwrap_or_else(|e| e.into_inner());
            let done = spans.iter().filter(|s| s.phase.is_some()).count();
            spec.phases.get(done).map_or_else(|| "draining".to_owned(), |ph| ph.label.clone())
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    spec: &RunSpec,
    collector: &Collector,
    spans: &[Span],
    seconds: f64,
    started_unix: Duration,
    signal: Option<SignalTrack>,
    series: BTreeMap<String, Vec<(f64, f64)>>,
    notes: Vec<String>,
) -> Summary {
    let open = matches!(spec.plan.load, Load::Open { .. });
    // Where each phase lies: planned (open loop) or as run (closed loop).
    let mut span_infos: Vec<SpanInfo> = Vec::new();
    let mut phase_seconds = vec![0.0; spec.phases.len()];
    if let Load::Open { profile, warmup_phase, .. } = &spec.plan.load {
        for (i, ph) in profile.phases().iter().enumerate() {
            let (start, end) = (ph.start.min(seconds), ph.end.min(seconds));
            if end <= start {
                continue;
            }
            let id = Load::open_phase(*warmup_phase, i);
            if let Some(p) = id {
                // Throughput over the phase, or until its last answer when the server fell
                // behind and answered after the phase ended.
                let last = collector.phases.get(p as usize).and_then(|a| a.last_done).map(|t| collector.seconds(t));
                phase_seconds[p as usize] = (end - start).max(last.map_or(0.0, |l| l - start));
            }
            span_infos.push(SpanInfo { label: ph.label.clone(), warmup: id.is_none(), start, end });
        }
    } else {
        for s in spans {
            let label = match s.phase {
                Some(p) => {
                    phase_seconds[p as usize] = s.end - s.start;
                    spec.phases[p as usize].label.clone()
                }
                None => "warm-up".to_owned(),
            };
            span_infos.push(SpanInfo { label, warmup: s.phase.is_none(), start: s.start, end: s.end });
        }
    }
    let empty = crate::stats::Acc::default();
    let phases: Vec<PhaseSummary> = spec
        .phases
        .iter()
        .enumerate()
        .map(|(i, ph)| {
            let acc = collector.phases.get(i).unwrap_or(&empty);
            PhaseSummary::new(ph.label.clone(), ph.concurrency, ph.rate, phase_seconds[i], acc)
        })
        .collect();
    let total_seconds: f64 = match &spec.plan.load {
        // Phases follow one another: from the first's start to the last answer.
        Load::Open { .. } => {
            let first = span_infos.iter().find(|s| !s.warmup).map_or(0.0, |s| s.start);
            let last_end = span_infos.iter().map(|s| s.end).fold(0.0, f64::max);
            let last_done = collector.total.last_done.map_or(0.0, |t| collector.seconds(t));
            (last_end.max(last_done) - first).max(0.0)
        }
        Load::Closed(_) => phase_seconds.iter().sum(),
    };
    let total_rate = open.then(|| {
        let offered: f64 = phases.iter().filter_map(|p| p.rate.map(|r| r * p.seconds)).sum();
        if total_seconds > 0.0 { offered / total_seconds } else { 0.0 }
    });
    let total = PhaseSummary::new("total".to_owned(), None, total_rate, total_seconds, &collector.total);
    Summary {
        loadtest: env!("CARGO_PKG_VERSION").to_owned(),
        title: spec.title.clone(),
        started_unix_ms: started_unix.as_millis() as u64,
        command: spec.command.clone(),
        target: spec.target_info.clone(),
        mode: if open { "open" } else { "closed" }.to_owned(),
        profile: spec.profile_text.clone(),
        seconds,
        interval_s: spec.interval.as_secs_f64(),
        total,
        phases,
        spans: span_infos,
        timeline: collector.timeline.clone(),
        latency_spectrum: spectrum(&collector.total.latency),
        service_spectrum: collector.total.service.as_ref().map(spectrum).unwrap_or_default(),
        service: collector.total.service.as_ref().and_then(Percentiles::of),
        send_lag: collector.total.lag.as_ref().and_then(Percentiles::of),
        connections_opened: collector.connections_opened(),
        waited: collector.waited(),
        resent: collector.resent(),
        signal,
        series,
        notes,
    }
}
