//! A TCP proxy between sluice and a real PostgreSQL that can be told to stop forwarding
//! (freeze: connections stay open, bytes are held, new connections are accepted but go nowhere)
//! and to resume, which is what a hung (not stopped) database looks like from the client.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy; dropping it stops accepting (open connections end with their peers).
pub struct FreezeProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    frozen: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl FreezeProxy {
    /// Forward 127.0.0.1:PORT to `upstream`.
    pub async fn start(upstream: SocketAddr) -> FreezeProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (frozen, watch) = watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let watch = watch.clone();
                tokio::spawn(async move {
                    thawed(&watch).await;
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pump(cr, sw, watch.clone()), pump(sr, cw, watch));
                });
            }
        });
        FreezeProxy { addr, frozen, task }
    }

    /// Stop forwarding bytes in both directions (and stop opening upstream connections).
    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    /// Forward again, including whatever was held.
    pub fn thaw(&self) {
        self.frozen.send_replace(false);
    }
}

impl Drop for FreezeProxy {
    fn drop(&mut self) {
        self.thaw();
        self.task.abort();
    }
}

async fn thawed(watch: &watch::Receiver<bool>) {
    let mut watch = watch.clone();
    let _ = watch.wait_for(|frozen| !*frozen).await;
}

/// Copy `from` to `to`, holding what was read while frozen until thawed.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    watch: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        thawed(&watch).await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        thawed(&watch).await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
