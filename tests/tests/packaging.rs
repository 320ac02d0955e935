//! Every publishable package of the workspace can be packaged and carries
//! what crates.io and docs.rs need: a description, a readme, keywords and
//! categories, both licence files (LICENSE-MIT, LICENSE-APACHE), docs.rs
//! metadata, every feature named in the crate docs, a version on every
//! library dependency between workspace crates, and no versioned
//! dev-dependency on a crate that depends back on it (`cargo package
//! --workspace` cannot order such a pair). Read from `cargo metadata
//! --no-deps`, so a new crate or a moved folder is checked the day it comes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

#[path = "support/metadata.rs"]
mod support;

/// `cargo metadata --no-deps` of the workspace.
fn metadata() -> Value {
    support::workspace_metadata()
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// `publish = false` shows as an empty list of registries.
fn publishable(p: &Value) -> bool {
    !p["publish"].as_array().is_some_and(|r| r.is_empty())
}

/// The `//!` lines of the library's root file.
fn crate_docs(p: &Value) -> String {
    let lib = p["targets"].as_array().into_iter().flatten().find(|t| {
        t["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "lib"))
    });
    let Some(src) = lib.map(|t| text(&t["src_path"])) else {
        return String::new();
    };
    std::fs::read_to_string(src)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.trim_start().starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every broken packaging rule, one line each.
fn problems(meta: &Value) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let licences = ["LICENSE-MIT", "LICENSE-APACHE"].map(|f| {
        (
            f,
            std::fs::read_to_string(root.join(f)).expect("the root licence files"),
        )
    });
    let packages: Vec<&Value> = meta["packages"].as_array().into_iter().flatten().collect();
    let names: BTreeSet<&str> = packages.iter().map(|p| text(&p["name"])).collect();
    // Library (non-dev) edges between workspace packages, for the cycle rule.
    let mut lib_deps: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for p in &packages {
        for d in p["dependencies"].as_array().into_iter().flatten() {
            if d["kind"].as_str() != Some("dev") && names.contains(text(&d["name"])) {
                lib_deps
                    .entry(text(&p["name"]))
                    .or_default()
                    .push(text(&d["name"]));
            }
        }
    }
    let depends_on = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(n) = stack.pop() {
            if n == to {
                return true;
            }
            if seen.insert(n) {
                stack.extend(lib_deps.get(n).into_iter().flatten().copied());
            }
        }
        false
    };
    let mut out = Vec::new();
    for p in packages.iter().filter(|p| publishable(p)) {
        let name = text(&p["name"]);
        let dir = Path::new(text(&p["manifest_path"]))
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        for field in ["description", "license", "readme", "rust_version"] {
            if text(&p[field]).is_empty() {
                out.push(format!("{name}: no `{field}` in Cargo.toml"));
            }
        }
        if !text(&p["readme"]).is_empty() && !dir.join(text(&p["readme"])).is_file() {
            out.push(format!("{name}: readme {} is missing", text(&p["readme"])));
        }
        if text(&p["repository"]).contains("example.invalid") {
            out.push(format!("{name}: placeholder repository"));
        }
        let count = |f: &str| p[f].as_array().map_or(0, Vec::len);
        if !(1..=5).contains(&count("keywords")) {
            out.push(format!("{name}: needs 1 to 5 keywords"));
        }
        if count("categories") == 0 {
            out.push(format!("{name}: no categories"));
        }
        if p["metadata"]["docs"]["rs"].is_null() {
            out.push(format!("{name}: no [package.metadata.docs.rs]"));
        }
        for (file, want) in &licences {
            match std::fs::read_to_string(dir.join(file)) {
                Ok(got) if got == *want => {}
                Ok(_) => out.push(format!("{name}: {file} differs from the root's")),
                Err(e) => out.push(format!("{name}: {file} cannot be read ({e})")),
            }
        }
        let docs = crate_docs(p);
        for feature in p["features"].as_object().into_iter().flatten().map(|f| f.0) {
            if feature != "default" && !docs.contains(&format!("`{feature}`")) {
                out.push(format!(
                    "{name}: feature `{feature}` is not named in the crate docs"
                ));
            }
        }
        for d in p["dependencies"].as_array().into_iter().flatten() {
            let dep = text(&d["name"]);
            if !names.contains(dep) || dep == name {
                continue;
            }
            let versioned = text(&d["req"]) != "*";
            let dev = d["kind"].as_str() == Some("dev");
            if !dev && !versioned {
                out.push(format!(
                    "{name}: dependency {dep} has a path but no version"
                ));
            }
            if dev && versioned && depends_on(dep, name) {
                out.push(format!(
                    "{name}: dev-dependency {dep} depends on {name}: give it a path only"
                ));
            }
        }
    }
    out
}

#[test]
fn every_publishable_crate_has_its_metadata_and_licences() {
    let meta = metadata();
    let count = meta["packages"]
        .as_array()
        .map_or(0, |p| p.iter().filter(|p| publishable(p)).count());
    assert!(count > 20, "only {count} publishable packages");
    let found = problems(&meta);
    assert!(found.is_empty(), "packaging broken:\n{}", found.join("\n"));
}

#[test]
fn the_check_finds_a_missing_licence_a_cycle_and_an_unversioned_path() {
    let mut meta = metadata();
    let packages = meta["packages"].as_array_mut().expect("packages");
    let by_name = |packages: &[Value], n: &str| {
        packages
            .iter()
            .position(|p| p["name"] == n)
            .expect("package")
    };
    // A crate whose folder has no licence files (as the kernel's move left it).
    let core = by_name(packages, "dsh-core");
    packages[core]["manifest_path"] = Value::from("/nonexistent/Cargo.toml");
    // A versioned dev-dependency that depends back (dsh-std needs subagents).
    let sub = by_name(packages, "dsh-subagents");
    if let Some(deps) = packages[sub]["dependencies"].as_array_mut() {
        deps.push(serde_json::json!({"name": "dsh-std", "req": "^0.1.0", "kind": "dev"}));
    }
    // A library dependency with a path and no version.
    let host = by_name(packages, "dsh-host");
    if let Some(deps) = packages[host]["dependencies"].as_array_mut() {
        deps.push(serde_json::json!({"name": "dsh-core", "req": "*", "kind": null}));
    }
    let found = problems(&meta).join("\n");
    for want in [
        "dsh-core: LICENSE-MIT cannot be read",
        "dsh-core: readme README.md is missing",
        "dsh-subagents: dev-dependency dsh-std depends on dsh-subagents",
        "dsh-host: dependency dsh-core has a path but no version",
    ] {
        assert!(found.contains(want), "missing {want:?} in:\n{found}");
    }
}
