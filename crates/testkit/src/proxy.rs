//! A TCP proxy in front of the API server for one client's traffic, with the
//! faults a real network gives an agent: latency, a black hole (packets
//! vanish, connections stay open), and every connection reset at once.
//!
//! The proxy forwards bytes only; TLS stays end to end, so the client still
//! verifies the API server's certificate (issued for 127.0.0.1).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// How the proxy treats traffic right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything at once.
    None,
    /// Hold every chunk, in both directions, this long before forwarding.
    Delay(Duration),
    /// Accept connections and read from them, but forward nothing, in either
    /// direction, until healed; held bytes then flow again, as after a
    /// partition heals and TCP retransmits.
    Blackhole,
}

struct Control {
    fault: watch::Sender<Fault>,
    // Bumped to reset every connection open at that moment.
    resets: watch::Sender<u64>,
    // Chunks read but held back by a black hole right now.
    held: watch::Sender<usize>,
}

/// A running proxy; dropping it closes the listener and resets its connections.
pub struct FaultProxy {
    addr: SocketAddr,
    control: Arc<Control>,
    accept_loop: AbortHandle,
}

/// A runtime of the testkit's own, so a proxy outlives the runtime of the
/// test that made it, like the control plane does.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("testkit-proxy")
            .enable_all()
            .build()
            .expect("building the proxy runtime")
    })
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port forwarding to `target`.
    pub fn start(target: SocketAddr) -> Result<FaultProxy> {
        let std_listener =
            std::net::TcpListener::bind("127.0.0.1:0").context("binding the fault proxy")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let control = Arc::new(Control {
            fault: watch::channel(Fault::None).0,
            resets: watch::channel(0).0,
            held: watch::channel(0).0,
        });
        let ctl = control.clone();
        let accept_loop = runtime()
            .spawn(async move {
                let listener = match TcpListener::from_std(std_listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!("fault proxy cannot listen: {e}");
                        return;
                    }
                };
                while let Ok((conn, _)) = listener.accept().await {
                    tokio::spawn(serve(conn, target, ctl.clone()));
                }
            })
            .abort_handle();
        Ok(FaultProxy {
            addr,
            control,
            accept_loop,
        })
    }

    /// The address clients should connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The fault in effect.
    pub fn fault(&self) -> Fault {
        *self.control.fault.borrow()
    }

    /// Adds `d` of latency to every chunk in both directions.
    pub fn delay(&self, d: Duration) {
        self.control.fault.send_replace(Fault::Delay(d));
    }

    /// Stops forwarding anything while keeping every connection open.
    pub fn blackhole(&self) {
        self.control.fault.send_replace(Fault::Blackhole);
    }

    /// Resets (TCP RST) every connection open now; new ones are accepted.
    pub fn reset_all(&self) {
        self.control.resets.send_modify(|n| *n += 1);
    }

    /// Waits until at least `n` chunks are held by a black hole, i.e. until a
    /// request has surely been sent into it.
    pub async fn held_chunks(&self, n: usize) {
        let mut held = self.control.held.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = held.wait_for(|h| *h >= n).await;
    }

    /// Ends any delay or black hole.
    pub fn heal(&self) {
        self.control.fault.send_replace(Fault::None);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept_loop.abort();
        self.reset_all();
    }
}

async fn serve(client: TcpStream, target: SocketAddr, control: Arc<Control>) {
    let mut resets = control.resets.subscribe();
    tokio::select! {
        _ = relay(client, target, control.clone()) => {}
        // Dropping the relay drops both sockets, and linger 0 makes that a RST.
        _ = resets.changed() => {}
    }
}

async fn relay(mut client: TcpStream, target: SocketAddr, control: Arc<Control>) {
    abortive_close(&client);
    // A black hole also swallows connection attempts: wait for the heal.
    if wait_passable(&control, false).await.is_err() {
        return;
    }
    let Ok(mut server) = TcpStream::connect(target).await else {
        return;
    };
    abortive_close(&server);
    let (cr, cw) = client.split();
    let (sr, sw) = server.split();
    tokio::join!(pump(cr, sw, &control), pump(sr, cw, &control));
}

/// Makes closing the socket send RST. A relay half-closes with FIN first when
/// a peer ends normally, so only a reset or an abort is felt as one.
fn abortive_close(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
}

/// Waits until the fault lets bytes through and returns the delay to apply.
/// `holding` says a chunk is waiting, which [`FaultProxy::held_chunks`] counts.
async fn wait_passable(
    control: &Control,
    holding: bool,
) -> Result<Duration, watch::error::RecvError> {
    let mut fault = control.fault.subscribe();
    let mut counted = false;
    let outcome = loop {
        match *fault.borrow_and_update() {
            Fault::None => break Ok(Duration::ZERO),
            Fault::Delay(d) => break Ok(d),
            Fault::Blackhole => {}
        }
        if holding && !counted {
            counted = true;
            control.held.send_modify(|n| *n += 1);
        }
        if let Err(e) = fault.changed().await {
            break Err(e);
        }
    };
    if counted {
        control.held.send_modify(|n| *n -= 1);
    }
    outcome
}

async fn pump<R, W>(mut from: R, mut to: W, control: &Control)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        match wait_passable(control, true).await {
            Ok(Duration::ZERO) => {}
            Ok(d) => tokio::time::sleep(d).await,
            Err(_) => break,
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
