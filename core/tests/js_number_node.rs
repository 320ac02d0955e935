//! J6: `dsh_core::json::js_number` prints every number as JavaScript's
//! `String(x)` does, checked against node itself for random bit patterns,
//! exact ties between two shortest candidates, and large integers. Skips
//! with a printed reason when node is missing; fails then under `CI=true`.

use std::io::Write as _;
use std::process::{Command, Stdio};

/// Deterministic inputs: splitmix64.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn values() -> Vec<f64> {
    let mut mix = Mix(34);
    let mut out = vec![
        562_949_953_421_312.0 + 0.25,
        1_177_494_534_775_288.0 + 0.25,
        -2_101_987_237_915_157.0 - 0.25,
        0.5,
        2.5,
        1e21,
        1e-7,
        5e-324,
        f64::MAX,
        f64::MIN_POSITIVE,
        9007199254740993.0,
    ];
    for _ in 0..20_000 {
        let v = f64::from_bits(mix.next());
        if v.is_finite() {
            out.push(v);
        }
    }
    // Short binary fractions near 2^44..2^56: where exact ties live.
    for _ in 0..20_000 {
        let k = mix.next() >> (8 + mix.next() % 12);
        let j = mix.next() % 16;
        let s = (mix.next() % 5) as u32;
        let v = k as f64 + (j as f64) / f64::from(1u32 << s);
        out.push(if mix.next().is_multiple_of(2) { v } else { -v });
    }
    // Large even integers (ties in the tens and beyond).
    for _ in 0..5_000 {
        let k = mix.next() >> 11;
        out.push(k as f64 * f64::from(1u32 << (mix.next() % 20)));
    }
    out
}

#[test]
fn js_number_prints_as_node_does() {
    let script = "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{const b=Buffer.alloc(8);\
        const o=[];for(const h of s.split('\\n')){if(!h)continue;b.writeBigUInt64BE(BigInt('0x'+h));\
        o.push(String(b.readDoubleBE(0)));}process.stdout.write(o.join('\\n')+'\\n');});";
    let child = Command::new("node")
        .args(["-e", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        let why = "node is not installed (the oracle for JavaScript number printing)";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true: {why}");
        }
        eprintln!("SKIPPED: {why}");
        return;
    };
    let values = values();
    let input: String = values
        .iter()
        .map(|v| format!("{:016x}\n", v.to_bits()))
        .collect();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(output.status.success(), "node failed");
    let node = String::from_utf8(output.stdout).unwrap();
    let node: Vec<&str> = node.lines().collect();
    assert_eq!(node.len(), values.len());
    let wrong: Vec<String> = values
        .iter()
        .zip(&node)
        .filter(|(v, js)| dsh_core::json::js_number(**v) != **js)
        .take(10)
        .map(|(v, js)| format!("{v:e}: dsh {} node {js}", dsh_core::json::js_number(*v)))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} values differ: {wrong:#?}",
        wrong.len()
    );
}
