//! The same TLS for the proxy's tokio-postgres connections (catalog, control pools) as for its
//! own backend connections.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_rustls::rustls::pki_types::ServerName;

use super::{server_end_point, server_name, ShardTls};

/// tokio-postgres's TLS connector for one server: its `sslmode` is set on the connection's
/// configuration (`Endpoint::pg_config`); verification is [`ShardTls`]'s.
#[derive(Clone)]
pub struct PostgresTls(pub Option<ShardTls>);

pub struct PostgresTlsConnect {
    tls: Option<(ShardTls, ServerName<'static>)>,
}

impl<S> MakeTlsConnect<S> for PostgresTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PostgresTlsStream<S>;
    type TlsConnect = PostgresTlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<PostgresTlsConnect> {
        Ok(PostgresTlsConnect {
            tls: match &self.0 {
                Some(tls) => Some((tls.clone(), server_name(domain)?)),
                None => None,
            },
        })
    }
}

impl<S> TlsConnect<S> for PostgresTlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PostgresTlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<PostgresTlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let Some((tls, name)) = self.tls else {
                return Err(io::Error::other(
                    "TLS is off for this server (sslmode=disable)",
                ));
            };
            let stream = tokio_rustls::TlsConnector::from(tls.config)
                .connect(name, stream)
                .await?;
            Ok(PostgresTlsStream(Box::new(stream)))
        })
    }
}

pub struct PostgresTlsStream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for PostgresTlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        let cert = self
            .0
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first());
        match cert.and_then(|c| server_end_point(c)) {
            Some(hash) => ChannelBinding::tls_server_end_point(hash),
            None => ChannelBinding::none(),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for PostgresTlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for PostgresTlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}
