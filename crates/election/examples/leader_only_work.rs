//! Runs leader-only work on whichever process holds a Lease.
//!
//! ```text
//! cargo run -p leasehold-election --example leader_only_work -- my-lease default pod-a
//! ```
//!
//! Uses the usual kubeconfig (KUBECONFIG, ~/.kube/config or in-cluster).
//! Start it twice with different identities, stop the leader with Ctrl-C,
//! and watch the other take over at once (the lease is released).

use std::time::Duration;

use leasehold_election::{Elector, Leadership, SimpleMetrics};
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let lease = args.next().unwrap_or_else(|| "leasehold-example".into());
    let namespace = args.next().unwrap_or_else(|| "default".into());
    let identity = args
        .next()
        .unwrap_or_else(|| format!("example-{}", std::process::id()));

    let client = kube::Client::try_default().await?;
    let metrics = Arc::new(SimpleMetrics::new());
    let handle = Elector::builder(client, namespace, lease, identity)
        .metrics(metrics.clone())
        .on_leading(|term, token| async move {
            println!("term {} begins: working", term.transitions);
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tick.tick() => println!("  working for term {}", term.transitions),
                }
            }
            println!("term {} ends: work stopped", term.transitions);
        })
        .spawn()?;

    let mut state = handle.state();
    tokio::spawn(async move {
        while state.changed().await.is_ok() {
            match &*state.borrow_and_update() {
                Leadership::Leading { term, .. } => println!("leading (term {})", term.transitions),
                Leadership::Following { holder } => println!("following {holder:?}"),
                other => println!("{other:?}"),
            }
        }
    });

    tokio::signal::ctrl_c().await?;
    handle.shutdown().await;
    print!("{}", metrics.render());
    Ok(())
}
