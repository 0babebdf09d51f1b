//! What fault-injection tests need beside the servers: signals, a process's resident memory,
//! samples of a Prometheus text page, raw sockets that misbehave (trickle, stall, sit idle) and
//! notice when the server closes them, and the start commands of the workspace's two servers.

use std::path::Path;
use std::time::{Duration, Instant};

pub use nix::sys::signal::Signal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Command;

/// Sends `sig` to process `pid`.
pub fn signal(pid: i32, sig: Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).unwrap_or_else(|e| panic!("kill -{sig} {pid}: {e}"));
}

/// Resident memory of process `pid` in bytes (`VmRSS` of `/proc/PID/status`).
pub fn rss_bytes(pid: i32) -> u64 {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let line = text.lines().find(|l| l.starts_with("VmRSS:")).unwrap_or_else(|| panic!("{path}: no VmRSS"));
    let kib: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS: N kB");
    kib * 1024
}

/// The sum of the samples of metric `name` (exactly, e.g. `gateway_requests_total`) in the
/// Prometheus / OpenMetrics `text` whose labels include every `(label, value)` of `labels`;
/// 0 when there is none (a counter never incremented may have no sample yet).
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, label_text) = match series.split_once('{') {
                Some((m, rest)) => (m, rest.strip_suffix('}')?),
                None => (series, ""),
            };
            (metric == name && labels.iter().all(|(k, v)| label_text.contains(&format!("{k}=\"{v}\""))))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .fold(0.0, |sum, v| sum + v)
}

/// The address `host:port` of a base URL `http://host:port`.
pub fn authority(url: &str) -> &str {
    url.trim_start_matches("http://").trim_end_matches('/')
}

/// A TCP connection to the server at base URL `url`.
pub async fn connect(url: &str) -> TcpStream {
    let addr = authority(url);
    let s = TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    s.set_nodelay(true).expect("TCP_NODELAY");
    s
}

/// How a misbehaving connection ended.
#[derive(Debug, Clone)]
pub struct Closed {
    /// From the reference instant the caller gave to the server's close (EOF, reset, or a
    /// write refused), or `None` if the server kept it open until the caller's limit.
    pub after: Option<Duration>,
    /// What the server sent before closing (an answer such as a 408, or nothing).
    pub received: Vec<u8>,
}

impl Closed {
    /// The status code of the first answer received, if any.
    pub fn status(&self) -> Option<u16> {
        let text = std::str::from_utf8(self.received.get(..12)?).ok()?;
        text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
    }
}

/// Keeps `stream` open, writing `trickle` one byte every `every` (then nothing), until the
/// server closes it or `limit` has passed since `since`. Whatever the server sends is kept.
pub async fn hold_until_closed(
    mut stream: TcpStream,
    since: Instant,
    trickle: &[u8],
    every: Duration,
    limit: Duration,
) -> Closed {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let mut next = 0;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let deadline = tokio::time::Instant::from_std(since + limit);
    loop {
        tokio::select! {
            r = stream.read(&mut buf) => match r {
                Ok(0) | Err(_) => return Closed { after: Some(since.elapsed()), received },
                Ok(n) => received.extend_from_slice(&buf[..n]),
            },
            _ = tick.tick(), if next < trickle.len() => {
                if stream.write_all(&trickle[next..=next]).await.is_err() {
                    return Closed { after: Some(since.elapsed()), received };
                }
                next += 1;
            }
            () = tokio::time::sleep_until(deadline) => return Closed { after: None, received },
        }
    }
}

/// One HTTP/1.1 answer read from a raw connection.
#[derive(Debug, Clone)]
pub struct RawAnswer {
    pub status: u16,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Reads one whole answer (`content-length` or chunked) from `stream`, whose leftover bytes
/// from earlier reads are in `pending` (and the bytes after this answer are left there).
/// `Err` with what was received when the connection closes first.
pub async fn read_answer(stream: &mut TcpStream, pending: &mut Vec<u8>) -> Result<RawAnswer, String> {
    let mut buf = [0u8; 8192];
    loop {
        if let Some(answer) = parse_answer(pending)? {
            return Ok(answer);
        }
        match stream.read(&mut buf).await {
            Ok(0) => {
                return Err(format!("closed after {} bytes: {:?}", pending.len(), String::from_utf8_lossy(pending)));
            }
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("{e} after {} bytes", pending.len())),
        }
    }
}

/// An answer at the start of `data` if it is complete (and removed from `data`).
fn parse_answer(data: &mut Vec<u8>) -> Result<Option<RawAnswer>, String> {
    let Some(head_end) = data.windows(4).position(|w| w == b"\r\n\r\n") else { return Ok(None) };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP/1.1 status line: {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    let start = head_end + 4;
    let (body, end) = if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut body = Vec::new();
        let mut at = start;
        loop {
            let Some(line_end) = data[at..].windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
            let size_text = String::from_utf8_lossy(&data[at..at + line_end]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| format!("bad chunk size {size_text:?}"))?;
            let chunk = at + line_end + 2;
            if data.len() < chunk + size + 2 {
                return Ok(None);
            }
            body.extend_from_slice(&data[chunk..chunk + size]);
            at = chunk + size + 2;
            if size == 0 {
                break (body, at);
            }
        }
    } else {
        let len: usize = find("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        if data.len() < start + len {
            return Ok(None);
        }
        (data[start..start + len].to_vec(), start + len)
    };
    data.drain(..end);
    Ok(Some(RawAnswer { status, headers, body }))
}

/// A worker's start command: the bundled model (or `WORKER_MODEL`), ONNX Runtime, one intra-op
/// thread, `RUST_LOG=warn`, on a free loopback port; `extra` flags after.
pub fn worker_cmd(extra: &[&str]) -> Command {
    worker_cmd_on("127.0.0.1:0", extra)
}

/// [`worker_cmd`] on the given address (to restart a worker where it was).
pub fn worker_cmd_on(listen: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(crate::bin("worker"));
    cmd.args(["--listen", listen, "--intra-op-threads", "1"]).arg("--model").arg(crate::model_dir());
    cmd.arg("--ort-lib").arg(crate::ort_lib()).args(extra).env("RUST_LOG", "warn");
    cmd
}

/// A gateway's start command on free loopback ports (client and admin), polling its workers
/// every 100 ms and re-probing after 100 ms, `RUST_LOG=warn`; `extra` flags after (workers:
/// `--worker URL` or `--worker-file PATH`).
pub fn gateway_cmd(extra: &[&str]) -> Command {
    let mut cmd = Command::new(crate::bin("gateway"));
    cmd.args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]);
    cmd.args(["--stats-interval", "100ms", "--probe-backoff", "100ms"]).args(extra).env("RUST_LOG", "warn");
    cmd
}

/// Writes `urls` as a worker file (one URL a line) atomically (a rename), so that a gateway
/// polling it never reads half of it.
pub fn write_worker_file(path: &Path, urls: &[&str]) {
    let tmp = path.with_extension("tmp");
    let text: String = urls.iter().map(|u| format!("{u}\n")).collect();
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("{}: {e}", tmp.display()));
    std::fs::rename(&tmp, path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// A scratch directory under the target directory, fresh for `name`, not removed (it is in
/// the ignored `target/`, and what a failed test left is worth reading).
pub fn scratch_dir(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe.parent().expect("deps/").join(format!("scratch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sum_matches_name_and_labels() {
        let text = "# TYPE gateway_requests counter\n\
            gateway_requests_total{pool=\"default\",worker=\"http://a:1\",outcome=\"ok\"} 3\n\
            gateway_requests_total{pool=\"default\",worker=\"http://b:2\",outcome=\"ok\"} 4\n\
            gateway_requests_total{pool=\"default\",worker=\"http://a:1\",outcome=\"timeout\"} 1\n\
            gateway_requests_total_created{pool=\"default\"} 9\n\
            gateway_outstanding 2\n";
        assert_eq!(metric_sum(text, "gateway_requests_total", &[]), 8.0);
        assert_eq!(metric_sum(text, "gateway_requests_total", &[("worker", "http://a:1")]), 4.0);
        assert_eq!(metric_sum(text, "gateway_requests_total", &[("worker", "http://a:1"), ("outcome", "ok")]), 3.0);
        assert_eq!(metric_sum(text, "gateway_outstanding", &[]), 2.0);
        assert_eq!(metric_sum(text, "gateway_ejections_total", &[]), 0.0);
    }

    #[test]
    fn answers_are_parsed_whole_or_not_at_all() {
        let mut data = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}HTTP/1.1 503 Service".to_vec();
        let a = parse_answer(&mut data).unwrap().unwrap();
        assert_eq!((a.status, a.body.as_slice()), (200, &b"{}"[..]));
        assert_eq!(data, b"HTTP/1.1 503 Service");
        assert!(parse_answer(&mut data).unwrap().is_none());
        let mut chunked =
            b"HTTP/1.1 408 Request Timeout\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec();
        let a = parse_answer(&mut chunked).unwrap().unwrap();
        assert_eq!((a.status, a.body.as_slice()), (408, &b"abc"[..]));
        assert!(chunked.is_empty());
        let mut partial = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nab".to_vec();
        assert!(parse_answer(&mut partial).unwrap().is_none());
    }
}
