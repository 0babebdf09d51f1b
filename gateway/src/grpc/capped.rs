//! Accepted connections under a cap: each holds a permit while open; a connection accepted past
//! the cap is closed at once (as the HTTP listeners' cap does, without an answer: HTTP/2 has
//! none to give before its preface).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// The listener's connections, at most `max` open at once.
pub(crate) struct Incoming {
    tcp: TcpListener,
    permits: Arc<Semaphore>,
}

impl Incoming {
    pub(crate) fn new(tcp: TcpListener, max: usize) -> Self {
        Self { tcp, permits: Arc::new(Semaphore::new(max.max(1))) }
    }
}

/// An accepted connection and its permit.
pub(crate) struct Conn {
    tcp: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl Stream for Incoming {
    type Item = io::Result<Conn>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            match this.tcp.poll_accept(cx) {
                Poll::Pending => return Poll::Pending,
                // Accept errors (EMFILE, a reset before accept) are the peer's or passing:
                // logged, and the listener goes on.
                Poll::Ready(Err(e)) => {
                    tracing::debug!(error = %e, "grpc accept failed");
                    continue;
                }
                Poll::Ready(Ok((tcp, _))) => match this.permits.clone().try_acquire_owned() {
                    Ok(permit) => return Poll::Ready(Some(Ok(Conn { tcp, _permit: permit }))),
                    Err(_) => {
                        tracing::debug!("grpc connection refused: --max-connections reached");
                        drop(tcp);
                    }
                },
            }
        }
    }
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;
    fn connect_info(&self) -> TcpConnectInfo {
        self.tcp.connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}
