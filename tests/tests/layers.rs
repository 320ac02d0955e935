//! The floors of the workspace (docs/architecture.md, "Floors"): every
//! package has a floor, a library dependency never points to a higher
//! floor, and the dependencies form no cycle. Read from
//! `cargo metadata --no-deps` (the Cargo.toml files), so a new crate or a
//! new edge is checked the day it is added.
//!
//! Dev-dependencies are exempt (a plugin's tests may run it in a runtime;
//! cargo builds them apart, so they form no library cycle).

use std::collections::{BTreeMap, BTreeSet};

/// The floors, lowest first. A crate may depend on crates of its own floor
/// or below.
const FLOORS: &[(&str, &[&str])] = &[
    // The no_std, sans-IO core: events, session, stream grammar, agent loop.
    ("core", &["dsh-core"]),
    // The sans-IO kernel over the core: plugins, flush gate, tool scheduling.
    ("kernel", &["dsh-runtime"]),
    // Host glue and ports: clock, model provider trait, cancel token, the
    // hosted runtimes' error, the session store trait.
    ("host", &["dsh-host", "dsh-store"]),
    // Adapters: model providers, store backends, tool bodies, the ACP wire,
    // the adapter test kit.
    (
        "adapters",
        &[
            "dsh-deepseek",
            "dsh-anthropic",
            "dsh-jsonl",
            "dsh-redb",
            "dsh-postgres",
            "dsh-tools",
            "dsh-acp",
            "dsh-testkit",
        ],
    ),
    // Plugins: kernel plugins, runtime-agnostic.
    (
        "plugins",
        &[
            "dsh-approval",
            "dsh-system-prompt",
            "dsh-compaction",
            "dsh-subagents",
            "dsh-otel",
            "dsh-hooks",
            "dsh-skills",
            "dsh-web",
            "dsh-spill",
            "dsh-mcp",
        ],
    ),
    // Runtimes: the loops that carry the kernel's effects.
    (
        "runtimes",
        &["dsh-shell", "dsh-std", "dsh-smol", "dsh-embedded"],
    ),
    // Front ends.
    ("cli", &["dsh-cli"]),
    // Test and measurement crates, published by nobody.
    (
        "checks",
        &["dsh-integration", "dsh-benches", "dsh-runtime-contract"],
    ),
];

/// One dependency edge between workspace packages.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    from: String,
    to: String,
    /// `dev` dependencies are exempt from the floor rule.
    dev: bool,
}

fn floor_of(name: &str) -> Option<usize> {
    FLOORS
        .iter()
        .position(|(_, members)| members.contains(&name))
}

/// Every broken rule: packages with no floor, edges to a higher floor, and
/// cycles among the non-dev edges.
fn violations(packages: &BTreeSet<String>, edges: &[Edge]) -> Vec<String> {
    let mut out = Vec::new();
    for p in packages {
        if floor_of(p).is_none() {
            out.push(format!("{p} has no floor: add it to FLOORS (tests/tests/layers.rs) and docs/architecture.md"));
        }
    }
    for e in edges.iter().filter(|e| !e.dev) {
        if let (Some(a), Some(b)) = (floor_of(&e.from), floor_of(&e.to))
            && b > a
        {
            out.push(format!(
                "{} (floor {}) depends on {} (floor {}), a higher floor",
                e.from, FLOORS[a].0, e.to, FLOORS[b].0
            ));
        }
    }
    // Cycles: depth-first search over the library edges.
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for e in edges.iter().filter(|e| !e.dev) {
        graph.entry(&e.from).or_default().push(&e.to);
    }
    let mut state: BTreeMap<&str, u8> = BTreeMap::new(); // 1 on the path, 2 done
    fn visit<'a>(
        n: &'a str,
        graph: &BTreeMap<&'a str, Vec<&'a str>>,
        state: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
        out: &mut Vec<String>,
    ) {
        match state.get(n) {
            Some(2) => return,
            Some(1) => {
                let from = path.iter().position(|p| *p == n).unwrap_or(0);
                let mut cycle: Vec<&str> = path[from..].to_vec();
                cycle.push(n);
                out.push(format!("dependency cycle: {}", cycle.join(" -> ")));
                return;
            }
            _ => {}
        }
        state.insert(n, 1);
        path.push(n);
        for m in graph.get(n).into_iter().flatten() {
            visit(m, graph, state, path, out);
        }
        path.pop();
        state.insert(n, 2);
    }
    let nodes: Vec<&str> = graph.keys().copied().collect();
    for n in nodes {
        visit(n, &graph, &mut state, &mut Vec::new(), &mut out);
    }
    out
}

#[path = "support/metadata.rs"]
mod support;

/// The workspace's packages and the edges between them, from `cargo metadata`.
fn workspace() -> (BTreeSet<String>, Vec<Edge>) {
    let meta = support::workspace_metadata();
    let packages = meta["packages"].as_array().expect("a package list");
    let names: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(String::from))
        .collect();
    let mut edges = Vec::new();
    for p in packages {
        let from = p["name"].as_str().unwrap_or_default();
        for d in p["dependencies"].as_array().into_iter().flatten() {
            let to = d["name"].as_str().unwrap_or_default();
            if names.contains(to) && to != from {
                edges.push(Edge {
                    from: from.into(),
                    to: to.into(),
                    dev: d["kind"].as_str() == Some("dev"),
                });
            }
        }
    }
    edges.sort();
    edges.dedup();
    (names, edges)
}

#[test]
fn every_crate_stays_on_its_floor() {
    let (packages, edges) = workspace();
    assert!(
        packages.contains("dsh-core") && packages.len() > 10,
        "{packages:?}"
    );
    let found = violations(&packages, &edges);
    assert!(found.is_empty(), "layering broken:\n{}", found.join("\n"));
}

#[test]
fn the_check_fails_on_an_upward_edge_a_cycle_and_a_crate_with_no_floor() {
    let (mut packages, mut edges) = workspace();
    let edge = |from: &str, to: &str| Edge {
        from: from.into(),
        to: to.into(),
        dev: false,
    };
    // An adapter importing a runtime.
    edges.push(edge("dsh-tools", "dsh-std"));
    // A plugin depending on one runtime (what dsh-subagents did).
    edges.push(edge("dsh-subagents", "dsh-std"));
    // The kernel importing an adapter (what its `host` module did).
    edges.push(edge("dsh-runtime", "dsh-deepseek"));
    // A cycle on one floor.
    edges.push(edge("dsh-jsonl", "dsh-redb"));
    edges.push(edge("dsh-redb", "dsh-jsonl"));
    packages.insert("dsh-new".into());
    let found = violations(&packages, &edges);
    let has = |s: &str| found.iter().any(|v| v.contains(s));
    assert!(
        has("dsh-tools (floor adapters) depends on dsh-std (floor runtimes)"),
        "{found:?}"
    );
    assert!(
        has("dsh-subagents (floor plugins) depends on dsh-std"),
        "{found:?}"
    );
    assert!(
        has("dsh-runtime (floor kernel) depends on dsh-deepseek"),
        "{found:?}"
    );
    assert!(
        has("dependency cycle: dsh-jsonl -> dsh-redb -> dsh-jsonl"),
        "{found:?}"
    );
    assert!(has("dsh-new has no floor"), "{found:?}");
    // A dev-dependency upwards is allowed (tests may use a runtime).
    let dev = Edge {
        from: "dsh-compaction".into(),
        to: "dsh-std".into(),
        dev: true,
    };
    assert!(
        violations(&packages, &[dev])
            .iter()
            .all(|v| !v.contains("dsh-compaction"))
    );
}
