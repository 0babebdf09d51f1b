//! Binding a listening socket with a deep accept queue.
//!
//! `tokio::net::TcpListener::bind` listens with a backlog of 1024. When hundreds of clients
//! connect at once (a load generator's start, a gateway's pool refilling after a restart), the
//! accept queue overflows before the accept loop drains it, the kernel drops the final ACKs (or
//! answers with SYN cookies) and those clients retransmit after a full second, which a load
//! test's maximum latency then shows in every step. [`BACKLOG`] asks for more; the kernel caps it at `net.core.somaxconn`
//! (4096 by default since Linux 5.4).

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// The accept queue asked for (the kernel caps it at `net.core.somaxconn`).
pub const BACKLOG: u32 = 16_384;

/// Like `TcpListener::bind` (address reuse on Unix, as tokio does), with a [`BACKLOG`]-deep
/// accept queue.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The connections of a burst larger than tokio's backlog (1024) are all accepted at once:
    /// with a shallower queue the kernel drops the handshake's last packet for the overflow, and
    /// those connections reach `accept` only when the SYN-ACK is retransmitted, a second later.
    #[tokio::test]
    async fn a_burst_of_1100_connections_is_accepted_without_waiting_for_retransmits() {
        let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(4096);
        // Two descriptors per connection (both ends live in this process): stay under the limit.
        let nofile = crate::raise_nofile_limit().unwrap_or(1024) as usize;
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        assert_ne!(addr.port(), 0);
        let n = 1100.min(somaxconn).min(nofile.saturating_sub(64) / 2);
        let mut clients = Vec::with_capacity(n);
        for _ in 0..n {
            // Past a full queue a SYN may be dropped: the connect then waits for its retransmit.
            let c = tokio::time::timeout(Duration::from_millis(800), tokio::net::TcpStream::connect(addr)).await;
            clients.push(c.expect("connect within 800 ms: the accept queue overflowed").unwrap());
        }
        let accepted = tokio::time::timeout(Duration::from_millis(800), async {
            for _ in 0..n {
                listener.accept().await.unwrap();
            }
        })
        .await;
        assert!(accepted.is_ok(), "{n} connections not all accepted within 800 ms: the accept queue overflowed");
    }
}
