//! `stream.sse` (seed 1, 200000 chunks, about 59 MB) through the DeepSeek
//! adapter's SSE framer and translator in 16 KiB pieces, against a bare
//! serde_json parse of the same `data:` payloads.
//!
//! All three report throughput over the whole body's size, so their ratio is
//! the ratio of their times:
//!
//! - `decode_16k`: `StreamDecoder::push` on 16 KiB pieces, producing every
//!   `StreamChunk` (then dropped, as a consumer would);
//! - `bare_parse_typed`: `serde_json::from_str` of each payload into the
//!   decoder's own typed, borrowing payload struct, nothing else;
//! - `bare_parse_ignored_any`: `serde_json::from_str::<IgnoredAny>` of each
//!   payload (the floor of any JSON parse).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_benches::Workloads;
use dsh_deepseek::StreamDecoder;
use serde::de::IgnoredAny;

fn sse(c: &mut Criterion) {
    let workloads = Workloads::generate(1, 200_000, 1000);
    let body = std::fs::read(workloads.stream_sse()).expect("stream.sse");
    let text = std::str::from_utf8(&body).expect("UTF-8 body");
    let payloads: Vec<&str> = text
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter(|p| *p != "[DONE]")
        .collect();

    let mut group = c.benchmark_group("stream.sse");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.sample_size(10);

    group.bench_function("decode_16k", |b| {
        b.iter(|| {
            let mut decoder = StreamDecoder::new();
            let mut out = Vec::with_capacity(1024);
            let mut n = 0usize;
            for piece in body.chunks(16 * 1024) {
                decoder.push(piece, &mut out).expect("valid body");
                n += out.len();
                out.clear();
            }
            decoder.finish().expect("complete body");
            black_box(n)
        })
    });

    group.bench_function("bare_parse_typed", |b| {
        b.iter(|| {
            let mut ok = 0usize;
            for p in &payloads {
                ok += usize::from(dsh_deepseek::bench_support::parse_payload(black_box(p)));
            }
            black_box(ok)
        })
    });

    group.bench_function("bare_parse_ignored_any", |b| {
        b.iter(|| {
            let mut ok = 0usize;
            for p in &payloads {
                ok += usize::from(serde_json::from_str::<IgnoredAny>(black_box(p)).is_ok());
            }
            black_box(ok)
        })
    });
    group.finish();
}

criterion_group!(benches, sse);
criterion_main!(benches);
