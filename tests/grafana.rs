//! The Grafana dashboard and src/metrics.rs describe the same metrics: every series the dashboard
//! queries is declared, and every declared metric has a panel.

use std::collections::BTreeSet;

fn declared() -> BTreeSet<String> {
    shardwire::metrics::ALL
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// The `shardwire_…` names in every panel query of the dashboard.
fn queried() -> BTreeSet<String> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/grafana/shardwire.json"
    ))
    .expect("grafana/shardwire.json");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let mut names = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            let mut rest = expr;
            while let Some(start) = rest.find("shardwire_") {
                let tail = &rest[start..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                let name = &tail[..end];
                // A histogram's series: its buckets, sum and count.
                let stem = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix))
                    .filter(|stem| declared().contains(*stem));
                names.insert(stem.unwrap_or(name).to_string());
                rest = &tail[end..];
            }
        }
    }
    names
}

#[test]
fn dashboard_and_metrics_agree() {
    let declared = declared();
    let queried = queried();
    let undeclared: Vec<_> = queried.difference(&declared).collect();
    let without_panel: Vec<_> = declared.difference(&queried).collect();
    assert!(
        undeclared.is_empty(),
        "dashboard queries undeclared metrics: {undeclared:?}"
    );
    assert!(
        without_panel.is_empty(),
        "metrics without a panel: {without_panel:?}"
    );
}
