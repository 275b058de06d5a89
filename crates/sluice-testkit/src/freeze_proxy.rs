//! A TCP proxy in front of PostgreSQL (or any TCP server) that can freeze and drop
//! connections: a hung database in the tests, the `soak` bench's database faults (the fleet's
//! processes reach the database through it, the bench's own checking connection goes direct).
//!
//! - [`FreezeProxy::set_frozen`]: while frozen, no byte is forwarded in either direction on any
//!   connection (what was read is held, then written when it thaws) and new connections are
//!   held unanswered: a database that stopped answering (a long lock, a stalled disk, a
//!   network partition that TCP has not noticed yet).
//! - [`FreezeProxy::set_down`]: every open connection is closed at once and, while down, new ones are
//!   closed as soon as they are accepted: a database restart as its clients see it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What every connection follows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct State {
    /// Hold every byte and every new connection.
    frozen: bool,
    /// Refuse (close) new connections.
    down: bool,
    /// Bumped when the proxy goes down: connections of an older epoch close.
    epoch: u64,
}

/// The proxy, listening on 127.0.0.1 until dropped.
pub struct FreezeProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    state: Arc<watch::Sender<State>>,
    accept: JoinHandle<()>,
}

impl FreezeProxy {
    /// Listen on a free loopback port and forward each connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<FreezeProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("bind the database proxy")?;
        let addr = listener.local_addr().context("proxy address")?;
        let state = Arc::new(watch::Sender::new(State::default()));
        let accept = tokio::spawn(accept_loop(listener, upstream, state.clone()));
        Ok(Self {
            addr,
            state,
            accept,
        })
    }

    /// Freeze (`true`) or thaw (`false`) every connection, open and new.
    pub fn set_frozen(&self, frozen: bool) {
        self.state.send_modify(|s| s.frozen = frozen);
    }

    /// Go down (`true`: close every open connection, refuse new ones) or come back up.
    pub fn set_down(&self, down: bool) {
        self.state.send_modify(|s| {
            if down && !s.down {
                s.epoch += 1;
            }
            s.down = down;
        });
    }

    /// Freeze for `length`, then thaw.
    pub async fn freeze_for(&self, length: Duration) {
        self.set_frozen(true);
        tokio::time::sleep(length).await;
        self.set_frozen(false);
    }

    /// A restart: down for `length`, then up.
    pub async fn restart_for(&self, length: Duration) {
        self.set_down(true);
        tokio::time::sleep(length).await;
        self.set_down(false);
    }

    /// `url` with its host and port replaced by the proxy's.
    pub fn url_for(&self, url: &str) -> anyhow::Result<String> {
        let mut parsed = url::Url::parse(url).context("database url")?;
        parsed
            .set_host(Some("127.0.0.1"))
            .map_err(|e| anyhow::anyhow!("database url: {e}"))?;
        parsed
            .set_port(Some(self.addr.port()))
            .map_err(|()| anyhow::anyhow!("database url: no port"))?;
        Ok(parsed.to_string())
    }
}

impl Drop for FreezeProxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Close every connection too.
        self.set_down(true);
    }
}

/// The first address `url` (a `postgres://` URL) names, resolved.
pub async fn upstream_of(url: &str) -> anyhow::Result<SocketAddr> {
    let parsed = url::Url::parse(url).context("database url")?;
    let host = parsed.host_str().unwrap_or("127.0.0.1").to_owned();
    let port = parsed.port().unwrap_or(5432);
    tokio::net::lookup_host((host.as_str(), port))
        .await
        .with_context(|| format!("resolve {host}:{port}"))?
        .next()
        .with_context(|| format!("{host}:{port} resolves to nothing"))
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    state: Arc<watch::Sender<State>>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let mut rx = state.subscribe();
        tokio::spawn(async move {
            // A new connection waits out a freeze, unanswered.
            let Ok(now) = rx.wait_for(|s| !s.frozen).await.map(|s| *s) else {
                return;
            };
            if now.down {
                drop(client);
                return;
            }
            let Ok(server) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            let up = pipe(cr, sw, rx.clone(), now.epoch);
            let down = pipe(sr, cw, rx, now.epoch);
            // Either side closing (or the proxy going down) ends both.
            tokio::select! {
                () = up => {}
                () = down => {}
            }
        });
    }
}

/// Forward bytes from `from` to `to` until either closes or the epoch changes, holding them
/// while frozen.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut rx: watch::Receiver<State>,
    epoch: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = rx.wait_for(|s| s.epoch != epoch) => return,
        };
        match rx.wait_for(|s| s.epoch != epoch || !s.frozen).await {
            Ok(s) if s.epoch == epoch => {}
            _ => return,
        }
        tokio::select! {
            r = to.write_all(&buf[..n]) => if r.is_err() { return },
            _ = rx.wait_for(|s| s.epoch != epoch) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, bytes: &[u8]) -> Vec<u8> {
        s.write_all(bytes).await.unwrap();
        let mut got = vec![0u8; bytes.len()];
        s.read_exact(&mut got).await.unwrap();
        got
    }

    /// Reads until the peer closes: true when it did (EOF or reset) without sending anything.
    async fn closed(s: &mut TcpStream) -> bool {
        let mut buf = [0u8; 8];
        matches!(s.read(&mut buf).await, Ok(0) | Err(_))
    }

    #[tokio::test]
    async fn freeze_holds_bytes_then_releases_them() {
        let proxy = FreezeProxy::start(echo().await).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr).await.unwrap();
        assert_eq!(roundtrip(&mut c, b"one").await, b"one");
        proxy.set_frozen(true);
        c.write_all(b"two").await.unwrap();
        // Nothing comes back while frozen (an absence: no timing can make it fail wrongly).
        let mut buf = [0u8; 3];
        assert!(
            tokio::time::timeout(Duration::from_millis(300), c.read_exact(&mut buf))
                .await
                .is_err()
        );
        // A connection opened while frozen is held too.
        let mut late = TcpStream::connect(proxy.addr).await.unwrap();
        late.write_all(b"new").await.unwrap();
        proxy.set_frozen(false);
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"two");
        late.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"new");
        // And the freeze helper ends thawed.
        proxy.freeze_for(Duration::from_millis(50)).await;
        assert_eq!(roundtrip(&mut c, b"three").await, b"three");
    }

    #[tokio::test]
    async fn restart_closes_and_refuses_then_accepts() {
        let proxy = FreezeProxy::start(echo().await).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr).await.unwrap();
        assert_eq!(roundtrip(&mut c, b"one").await, b"one");
        proxy.set_down(true);
        assert!(closed(&mut c).await, "an open connection is closed");
        let mut refused = TcpStream::connect(proxy.addr).await.unwrap();
        let _ = refused.write_all(b"x").await;
        assert!(closed(&mut refused).await, "a new one is closed at once");
        proxy.set_down(false);
        let mut again = TcpStream::connect(proxy.addr).await.unwrap();
        assert_eq!(roundtrip(&mut again, b"back").await, b"back");
        // The helper: down for a while, then up.
        proxy.restart_for(Duration::from_millis(50)).await;
        assert!(closed(&mut again).await);
        let mut after = TcpStream::connect(proxy.addr).await.unwrap();
        assert_eq!(roundtrip(&mut after, b"up").await, b"up");
    }

    /// The test PostgreSQL, or `None` (skipped) unless `SLUICE_REQUIRE_SERVICES` is set.
    fn test_database() -> Option<String> {
        match std::env::var("SLUICE_TEST_DATABASE_URL") {
            Ok(url) => Some(url),
            Err(_) if std::env::var_os("SLUICE_REQUIRE_SERVICES").is_some() => {
                panic!("SLUICE_TEST_DATABASE_URL is required")
            }
            Err(_) => {
                eprintln!("skipped: SLUICE_TEST_DATABASE_URL is not set");
                None
            }
        }
    }

    async fn connect(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        tokio::spawn(conn);
        Ok(client)
    }

    #[tokio::test]
    async fn in_front_of_postgresql() {
        let Some(direct) = test_database() else {
            return;
        };
        let proxy = FreezeProxy::start(upstream_of(&direct).await.unwrap())
            .await
            .unwrap();
        let url = proxy.url_for(&direct).unwrap();
        let client = Arc::new(connect(&url).await.unwrap());
        let one = |c: Arc<tokio_postgres::Client>| async move {
            c.query_one("SELECT 1::INT4", &[])
                .await
                .map(|r| r.get::<_, i32>(0))
        };
        assert_eq!(one(client.clone()).await.unwrap(), 1);

        // Frozen: a query gets no answer until the thaw, then its answer.
        proxy.set_frozen(true);
        let mut pending = tokio::spawn(one(client.clone()));
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut pending)
                .await
                .is_err()
        );
        proxy.set_frozen(false);
        assert_eq!(pending.await.unwrap().unwrap(), 1);

        // Down: the open connection breaks and a new one is refused; up: it connects again.
        proxy.set_down(true);
        assert!(one(client.clone()).await.is_err());
        assert!(connect(&url).await.is_err());
        proxy.set_down(false);
        let again = Arc::new(connect(&url).await.unwrap());
        assert_eq!(one(again).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn rewrites_the_database_url() {
        let proxy = FreezeProxy::start(echo().await).await.unwrap();
        let url = proxy
            .url_for("postgres://postgres@db.example:5432/sluice_x")
            .unwrap();
        assert_eq!(
            url,
            format!(
                "postgres://postgres@127.0.0.1:{}/sluice_x",
                proxy.addr.port()
            )
        );
    }
}
