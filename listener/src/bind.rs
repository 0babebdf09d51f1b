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

use socket2::{Domain, Protocol, Socket, Type};
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

/// `n` listening sockets on one address, each with SO_REUSEPORT (and a [`BACKLOG`]-deep queue):
/// the kernel spreads new connections over them, so each of `n` single-threaded runtimes can
/// accept on its own socket. With port 0 the first picks the port and the others take it (read
/// it from the first's `local_addr`). Plain non-blocking std sockets: each is handed to its own
/// runtime (`TcpListener::from_std` registers it with the reactor of the runtime it is called
/// in).
pub fn bind_shared(addr: SocketAddr, n: usize) -> io::Result<Vec<std::net::TcpListener>> {
    let mut at = addr;
    let mut sockets = Vec::with_capacity(n);
    for _ in 0..n.max(1) {
        let socket = Socket::new(Domain::for_address(at), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&at.into())?;
        socket.listen(i32::try_from(BACKLOG).unwrap_or(i32::MAX))?;
        let listener = std::net::TcpListener::from(socket);
        if at.port() == 0 {
            at = listener.local_addr()?;
        }
        sockets.push(listener);
    }
    Ok(sockets)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn shared_sockets_take_one_port_and_each_accepts() {
        let sockets = bind_shared("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        let port = sockets[0].local_addr().unwrap().port();
        assert_ne!(port, 0);
        assert!(sockets.iter().all(|s| s.local_addr().unwrap().port() == port), "one port");
        let listeners: Vec<TcpListener> = sockets.into_iter().map(|s| TcpListener::from_std(s).unwrap()).collect();
        // The kernel spreads connections by their addresses: enough of them reach every socket.
        let mut clients = Vec::new();
        for _ in 0..64 {
            clients.push(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap());
        }
        let mut accepted = 0;
        for l in &listeners {
            let mut mine = 0;
            while let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(50), l.accept()).await {
                mine += 1;
            }
            assert!(mine > 0, "every socket of the group gets connections");
            accepted += mine;
        }
        assert_eq!(accepted, 64);
    }

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
