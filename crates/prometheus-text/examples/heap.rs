//! Heap held by a parsed exposition of kube-state-metrics' shape: N Pods
//! with one container each, the families the `state_*` metricsets read.
//! Prints the exposition's size and the live heap of the parsed families.
//!
//! Usage: cargo run --release -p leasehold-prometheus-text --example heap [N]

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded as given.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn exposition(pods: usize) -> String {
    let mut t = String::new();
    let families = [
        ("kube_pod_info", "gauge"),
        ("kube_pod_status_phase", "gauge"),
        ("kube_pod_status_ready", "gauge"),
        ("kube_pod_container_info", "gauge"),
        ("kube_pod_container_status_restarts_total", "counter"),
        ("kube_pod_container_status_running", "gauge"),
        ("kube_pod_container_resource_requests", "gauge"),
    ];
    for (name, kind) in families {
        let _ = writeln!(t, "# HELP {name} Information.\n# TYPE {name} {kind}");
        for i in 0..pods {
            let pod = format!(
                "namespace=\"bench\",pod=\"bench-pod-{i:05}\",uid=\"5b1c6f3e-0000-4000-8000-{i:012}\""
            );
            match name {
                "kube_pod_info" => {
                    let _ = writeln!(
                        t,
                        "{name}{{{pod},host_ip=\"10.0.0.1\",pod_ip=\"10.1.{}.{}\",node=\"bench-node\",created_by_kind=\"<none>\",created_by_name=\"<none>\",priority_class=\"\",host_network=\"false\"}} 1",
                        i / 250,
                        i % 250
                    );
                }
                "kube_pod_status_phase" => {
                    for phase in ["Pending", "Succeeded", "Failed", "Unknown", "Running"] {
                        let _ = writeln!(
                            t,
                            "{name}{{{pod},phase=\"{phase}\"}} {}",
                            u8::from(phase == "Pending")
                        );
                    }
                }
                "kube_pod_status_ready" => {
                    for c in ["true", "false", "unknown"] {
                        let _ = writeln!(
                            t,
                            "{name}{{{pod},condition=\"{c}\"}} {}",
                            u8::from(c == "false")
                        );
                    }
                }
                "kube_pod_container_info" => {
                    let _ = writeln!(
                        t,
                        "{name}{{{pod},container=\"c\",image_spec=\"registry.local/app:1.0\",image=\"registry.local/app:1.0\",image_id=\"\",container_id=\"\"}} 1"
                    );
                }
                "kube_pod_container_resource_requests" => {
                    for (r, u) in [("cpu", "core"), ("memory", "byte")] {
                        let _ = writeln!(
                            t,
                            "{name}{{{pod},container=\"c\",node=\"bench-node\",resource=\"{r}\",unit=\"{u}\"}} 0.1"
                        );
                    }
                }
                _ => {
                    let _ = writeln!(t, "{name}{{{pod},container=\"c\"}} 0");
                }
            }
        }
    }
    t
}

fn main() {
    let pods: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let text = exposition(pods);
    let before = LIVE.load(Ordering::Relaxed);
    let (families, errors) =
        leasehold_prometheus_text::parse_lenient(&text, leasehold_prometheus_text::Format::Text);
    let held = LIVE.load(Ordering::Relaxed) - before;
    let samples: usize = families.iter().map(|f| f.samples.len()).sum();
    assert!(errors.is_empty(), "{errors:?}");
    println!(
        "{pods} pods: exposition {:.2} MiB, {samples} samples, parsed families hold {:.2} MiB ({} B per sample)",
        text.len() as f64 / 1048576.0,
        held as f64 / 1048576.0,
        held / samples.max(1)
    );
}
