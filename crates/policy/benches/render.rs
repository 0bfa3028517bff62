//! Loading and rendering a 500-input policy with conditions and
//! substitutions, loading and rendering one mapping with 5,000 keys (where
//! anything quadratic shows), and evaluating a simple comparison.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use leasehold_policy::cond::{Condition, EvalOptions};
use leasehold_policy::{Policy, Vars, render};

const INPUTS: usize = 500;
const WIDE_KEYS: usize = 5_000;

fn policy_text() -> String {
    let mut s = String::from(
        "providers:\n  kubernetes_leaderelection:\n    leader_lease: bench\ninputs:\n",
    );
    for i in 0..INPUTS {
        s.push_str(&format!(
            "  - id: input-{i}\n    type: kubernetes/metrics\n    condition: ${{kubernetes_leaderelection.leader}} == true or {m} == 0\n    streams:\n      - data_stream:\n          dataset: bench.{i}\n        hosts: ['https://${{env.NODE_NAME}}:10250']\n        period: ${{env.PERIOD:10s}}\n        labels: ${{local.labels}}\n        condition: startsWith(${{env.NODE_NAME}}, 'node')\n      - metricsets: [a, b]\n        condition: ${{kubernetes_leaderelection.leader}} == true\n",
            m = i % 7
        ));
    }
    s
}

/// One input whose `fields` mapping has `n` keys.
fn wide_policy_text(n: usize) -> String {
    let mut s = String::from("inputs:\n  - type: t\n    fields:\n");
    for i in 0..n {
        s.push_str(&format!("      k{i}: v{i}\n"));
    }
    s
}

fn vars() -> Vars {
    Vars::from_json(&serde_json::json!({
        "env": {"NODE_NAME": "node-1"},
        "local": {"labels": {"team": "platform", "tier": "infra"}},
        "kubernetes_leaderelection": {"leader": false}
    }))
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let text = policy_text();
    let policy = Policy::parse(&text, "bench.yaml").unwrap();
    let vars = vars();
    let r = render(&policy, &vars).unwrap();
    assert_eq!(r.inputs.len() + r.dropped.len(), INPUTS);

    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("500_inputs", |b| {
        b.iter(|| Policy::parse(black_box(&text), "bench.yaml").unwrap())
    });
    g.finish();

    let mut g = c.benchmark_group("render");
    g.throughput(Throughput::Elements(INPUTS as u64));
    g.bench_function("500_inputs", |b| {
        b.iter(|| render(black_box(&policy), black_box(&vars)).unwrap())
    });
    g.finish();

    let wide = wide_policy_text(WIDE_KEYS);
    let mut g = c.benchmark_group("wide_map");
    g.throughput(Throughput::Elements(WIDE_KEYS as u64));
    g.bench_function("parse_and_render_5000_keys", |b| {
        b.iter(|| {
            let p = Policy::parse(black_box(&wide), "wide.yaml").unwrap();
            render(&p, &vars).unwrap()
        })
    });
    g.finish();

    let cond = Condition::parse("${kubernetes_leaderelection.leader} == true").unwrap();
    let mut g = c.benchmark_group("condition");
    g.throughput(Throughput::Elements(1));
    g.bench_function("eval_simple_comparison", |b| {
        b.iter(|| cond.eval(black_box(&vars), EvalOptions::default()).unwrap())
    });
    g.bench_function("parse_and_eval_simple_comparison", |b| {
        b.iter(|| {
            leasehold_policy::cond::eval_str(
                black_box("${kubernetes_leaderelection.leader} == true"),
                &vars,
                EvalOptions::default(),
            )
            .unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
