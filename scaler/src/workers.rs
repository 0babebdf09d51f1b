//! CPU worker processes as the replicas: started on `127.0.0.1:0` and joined to the gateway's
//! worker file once they print `listening on URL`; on scale-down the newest leaves the file
//! first, and only when the gateway no longer routes to it (it is gone from the admin port's
//! `/v1/pools`, or the worker file interval plus a margin passed) does it get SIGTERM and drain.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinSet;

/// How the workers are started and announced.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub bin: PathBuf,
    /// Extra arguments (`--listen 127.0.0.1:0` is added).
    pub args: Vec<String>,
    /// The gateway's `--worker-file`.
    pub file: PathBuf,
    /// The pool the lines name (`POOL URL`).
    pub pool: String,
    /// The gateway's `--worker-file-interval`.
    pub file_interval: Duration,
    /// The gateway's admin URL: a leaving worker is signalled once `/v1/pools` no longer lists it.
    pub gateway_admin: Option<String>,
    /// Worker logs go to `DIR/worker-N.log` (else nowhere).
    pub log_dir: Option<PathBuf>,
    /// How long a worker may take to print `listening on`.
    pub start_timeout: Duration,
    /// How long a SIGTERMed worker may drain before SIGKILL.
    pub drain_timeout: Duration,
    /// Devices to place workers on, one worker each (`--device D` is added): a worker starts
    /// only on a device no running or draining worker holds. Empty: no placement.
    pub devices: Vec<String>,
}

struct Worker {
    n: u32,
    url: String,
    child: Child,
    /// The device it was placed on (`--device`), if any.
    device: Option<String>,
}

/// What happened to a worker that left (for the log).
#[derive(Debug)]
pub struct Left {
    pub n: u32,
    pub url: String,
    pub outcome: String,
    pub device: Option<String>,
}

pub struct Workers {
    cfg: WorkerConfig,
    running: Vec<Worker>,
    leaving: JoinSet<Left>,
    /// Devices of the workers still draining (free again once they have exited).
    draining_devices: Vec<String>,
    next: u32,
}

impl Workers {
    pub fn new(cfg: WorkerConfig) -> anyhow::Result<Self> {
        let w = Self { cfg, running: Vec::new(), leaving: JoinSet::new(), draining_devices: Vec::new(), next: 1 };
        w.write_file()?;
        Ok(w)
    }

    /// Workers routed to now (the scale's replicas).
    pub fn count(&self) -> i32 {
        self.running.len() as i32
    }

    pub fn urls(&self) -> Vec<String> {
        self.running.iter().map(|w| w.url.clone()).collect()
    }

    /// Workers still draining.
    pub fn leaving(&self) -> usize {
        self.leaving.len()
    }

    /// Scale to `n`: start the missing workers (concurrently) or let the newest leave. Returns
    /// the count reached (fewer on a failed start, which is logged).
    pub async fn scale_to(&mut self, n: i32) -> i32 {
        let have = self.count();
        if n > have {
            let mut starting = JoinSet::new();
            let mut free = self.free_devices();
            for _ in have..n {
                let device = if self.cfg.devices.is_empty() {
                    None
                } else if free.is_empty() {
                    tracing::warn!(devices = ?self.cfg.devices, "no free device for another worker");
                    break;
                } else {
                    Some(free.remove(0))
                };
                let (num, cfg) = (self.next, self.cfg.clone());
                self.next += 1;
                starting.spawn(async move { (num, start(&cfg, num, device).await) });
            }
            while let Some(done) = starting.join_next().await {
                match done {
                    Ok((_, Ok(w))) => self.running.push(w),
                    Ok((num, Err(e))) => tracing::warn!(worker = num, "did not start: {e:#}"),
                    Err(e) => tracing::warn!("starting a worker: {e}"),
                }
            }
            self.running.sort_by_key(|w| w.n);
            if let Err(e) = self.write_file() {
                tracing::warn!("{e:#}");
            }
        } else if n < have {
            let mut gone = Vec::new();
            for _ in n..have {
                gone.push(self.running.pop().expect("counted"));
            }
            if let Err(e) = self.write_file() {
                tracing::warn!("{e:#}");
            }
            for w in gone {
                let cfg = self.cfg.clone();
                self.draining_devices.extend(w.device.clone());
                self.leaving.spawn(leave(cfg, w));
            }
        }
        self.count()
    }

    /// Workers that finished leaving since the last call.
    pub fn reap(&mut self) -> Vec<Left> {
        let mut out = Vec::new();
        while let Some(r) = self.leaving.try_join_next() {
            if let Ok(l) = r {
                self.release(&l);
                out.push(l);
            }
        }
        out
    }

    /// The configured devices no running or draining worker holds, in order.
    fn free_devices(&self) -> Vec<String> {
        let held =
            |d: &String| self.running.iter().any(|w| w.device.as_ref() == Some(d)) || self.draining_devices.contains(d);
        self.cfg.devices.iter().filter(|d| !held(d)).cloned().collect()
    }

    fn release(&mut self, l: &Left) {
        if let Some(d) = &l.device
            && let Some(i) = self.draining_devices.iter().position(|x| x == d)
        {
            self.draining_devices.remove(i);
        }
    }

    /// Every worker leaves (the file emptied first), and all are waited for.
    pub async fn shutdown(&mut self) -> Vec<Left> {
        self.scale_to(0).await;
        let mut out = Vec::new();
        while let Some(r) = self.leaving.join_next().await {
            if let Ok(l) = r {
                self.release(&l);
                out.push(l);
            }
        }
        out
    }

    /// The worker file, replaced in one rename so the gateway never reads half of it.
    fn write_file(&self) -> anyhow::Result<()> {
        let mut text = String::from("# written by the scaler: POOL URL\n");
        for w in &self.running {
            text.push_str(&format!("{} {}\n", self.cfg.pool, w.url));
        }
        let tmp = self.cfg.file.with_extension("tmp-scaler");
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &self.cfg.file).with_context(|| format!("replacing {}", self.cfg.file.display()))?;
        Ok(())
    }
}

async fn start(cfg: &WorkerConfig, n: u32, device: Option<String>) -> anyhow::Result<Worker> {
    let mut cmd = Command::new(&cfg.bin);
    cmd.args(&cfg.args).args(["--listen", "127.0.0.1:0"]);
    if let Some(d) = &device {
        cmd.args(["--device", d]);
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).kill_on_drop(true);
    let log = match &cfg.log_dir {
        Some(dir) => {
            let path = dir.join(format!("worker-{n}.log"));
            Some(std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?)
        }
        None => None,
    };
    match &log {
        Some(f) => cmd.stderr(f.try_clone()?),
        None => cmd.stderr(Stdio::null()),
    };
    let mut child = cmd.spawn().with_context(|| format!("spawning {}", cfg.bin.display()))?;
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let found = tokio::time::timeout(cfg.start_timeout, async {
        while let Some(line) = lines.next_line().await? {
            if let Some(url) = line.strip_prefix("listening on ") {
                return Ok::<_, std::io::Error>(Some(url.trim().to_owned()));
            }
        }
        Ok(None)
    })
    .await;
    let url = match found {
        Ok(Ok(Some(url))) => url,
        Ok(Ok(None)) => bail!("exited before listening ({:?})", child.wait().await.ok()),
        Ok(Err(e)) => bail!("reading its output: {e}"),
        Err(_) => bail!("not listening within {:?}", cfg.start_timeout),
    };
    // Keep reading its stdout so it never blocks on a full pipe.
    let mut log = log;
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(f) = log.as_mut() {
                use std::io::Write as _;
                let _ = writeln!(f, "{line}");
            }
        }
    });
    Ok(Worker { n, url, child, device })
}

/// The GPUs of this host as worker devices, `cuda:0` .. `cuda:N-1`: N is the count in
/// `CUDA_VISIBLE_DEVICES` when set, else the driver's (`/proc/driver/nvidia/gpus`, one folder a
/// GPU). None without a driver.
pub fn host_gpus() -> Vec<String> {
    let n = match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => v.split(',').filter(|d| !d.trim().is_empty()).count(),
        Err(_) => std::fs::read_dir("/proc/driver/nvidia/gpus").map_or(0, |d| d.count()),
    };
    (0..n).map(|i| format!("cuda:{i}")).collect()
}

/// Out of the file already: wait until the gateway stops routing, then SIGTERM and wait.
async fn leave(cfg: WorkerConfig, mut w: Worker) -> Left {
    let routed_until = wait_unrouted(&cfg, &w.url).await;
    let outcome = match terminate(&mut w.child, cfg.drain_timeout).await {
        Ok(s) => format!("{routed_until}; SIGTERM, drained, exited {s}"),
        Err(e) => format!("{routed_until}; {e}"),
    };
    Left { n: w.n, url: w.url, outcome, device: w.device }
}

async fn wait_unrouted(cfg: &WorkerConfig, url: &str) -> String {
    let margin = Duration::from_millis(500);
    let fallback = cfg.file_interval * 2 + margin;
    if let Some(admin) = &cfg.gateway_admin {
        let start = tokio::time::Instant::now();
        let limit = fallback + Duration::from_secs(10);
        while start.elapsed() < limit {
            match admin_get(admin, "/v1/pools").await {
                Ok(body) if !body.contains(url) => {
                    return format!("gone from the gateway's pool after {:.1?}", start.elapsed());
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        return format!("still listed by the gateway after {limit:?}");
    }
    tokio::time::sleep(fallback).await;
    format!("waited {fallback:?} (worker file interval x2 + margin)")
}

async fn terminate(child: &mut Child, limit: Duration) -> anyhow::Result<std::process::ExitStatus> {
    let pid = child.id().ok_or_else(|| anyhow!("already exited"))?;
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).context("SIGTERM")?;
    match tokio::time::timeout(limit, child.wait()).await {
        Ok(s) => Ok(s?),
        Err(_) => {
            let _ = child.start_kill();
            bail!("did not exit within {limit:?} of SIGTERM: killed")
        }
    }
}

/// A plain HTTP GET (the gateway's admin port), the body as text.
pub async fn admin_get(base: &str, path: &str) -> anyhow::Result<String> {
    use http_body_util::{BodyExt, Empty};
    let authority = base.strip_prefix("http://").ok_or_else(|| anyhow!("{base}: not http://"))?.trim_end_matches('/');
    let tcp = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(authority)).await??;
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::get(path).header("host", authority).body(Empty::<bytes::Bytes>::new())?;
    let resp = tokio::time::timeout(Duration::from_secs(2), send.send_request(req)).await??;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    conn.abort();
    if !status.is_success() {
        bail!("{path}: {status}");
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}
