//! BlockAssembler throughput over the standard chunk workload.
//!
//! Input: `chunks.jsonl` from `testdata/bench/gen_workloads.py` (seed 1,
//! 200000 chunks: one long reasoning block, one text block, three tool calls,
//! deferred block-ends, usage, finish), parsed into `StreamChunk`s before
//! timing. Throughput is in elements (chunks): criterion's time per iteration
//! divided by 200000 is the cost per chunk.
//!
//! - `assembler/push_then_blocks`: the figure. Push every chunk into a new
//!   `BlockAssembler`, then `blocks()`.
//! - `baseline/*`: reference points for reading the figure. `read_chunks`
//!   only loads each chunk's tag and fragment length, and `read_chunks_and_text`
//!   also loads the first byte of each fragment: no fold over a
//!   `[StreamChunk]` of this size can beat them. `copy_fragments` is a naive
//!   fold that appends every delta fragment to a per-index buffer and does
//!   nothing else (no kinds, ids, names, ends or finish).
//!
//! ```sh
//! cargo bench -p dsh-benches --bench assembler -- --warm-up-time 2 --measurement-time 5
//! ```

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_benches::Workloads;
use dsh_core::{BlockAssembler, StreamChunk};

/// Chunks in the standard workload.
const CHUNKS: u64 = 200_000;
/// Session events: not used here, so the generator is asked for few.
const EVENTS: u64 = 200;

fn load_chunks() -> Vec<StreamChunk> {
    let workloads = Workloads::generate(1, CHUNKS, EVENTS);
    let path = workloads.chunks_jsonl();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    // The deltas of one call share one head, as the decoder emits them.
    let mut head = None;
    let chunks: Vec<StreamChunk> = text
        .lines()
        .enumerate()
        .map(|(i, line)| {
            serde_json::from_str::<StreamChunk>(line)
                .unwrap_or_else(|e| panic!("chunks.jsonl line {}: {e}", i + 1))
                .share_head(&mut head)
        })
        .collect();
    assert_eq!(chunks.len() as u64, CHUNKS, "chunk count");
    chunks
}

/// The assembler must produce the workload's `block-end` blocks: all five are
/// deferred to the end and each carries its complete block.
fn check_result(chunks: &[StreamChunk]) {
    let expected: Vec<_> = chunks
        .iter()
        .filter_map(|c| match c {
            StreamChunk::BlockEnd { block, .. } => Some((**block).clone()),
            _ => None,
        })
        .collect();
    assert_eq!(expected.len(), 5, "block-end count");
    let mut assembler = BlockAssembler::new();
    for chunk in chunks {
        assembler.push(chunk);
    }
    assert_eq!(assembler.blocks().expect("workload assembles"), expected);
}

fn fragment(chunk: &StreamChunk) -> Option<(u64, &[u8])> {
    match chunk {
        StreamChunk::TextDelta { index, text } | StreamChunk::ReasoningDelta { index, text } => {
            Some((*index, text.as_bytes()))
        }
        StreamChunk::ToolCallDelta {
            index,
            arguments_delta,
            ..
        } => Some((*index, arguments_delta.as_bytes())),
        _ => None,
    }
}

fn assembler(c: &mut Criterion) {
    let chunks = load_chunks();
    check_result(&chunks);

    let mut group = c.benchmark_group("assembler");
    group.throughput(Throughput::Elements(CHUNKS));
    group.bench_function("push_then_blocks", |b| {
        b.iter(|| {
            let mut assembler = BlockAssembler::new();
            for chunk in &chunks {
                assembler.push(black_box(chunk));
            }
            assembler.blocks()
        })
    });
    group.finish();

    let mut group = c.benchmark_group("baseline");
    group.throughput(Throughput::Elements(CHUNKS));
    group.bench_function("read_chunks", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for chunk in &chunks {
                n += fragment(black_box(chunk)).map_or(1, |(_, s)| s.len());
            }
            n
        })
    });
    group.bench_function("read_chunks_and_text", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for chunk in &chunks {
                n += fragment(black_box(chunk))
                    .and_then(|(_, s)| s.first().copied())
                    .map_or(1, usize::from);
            }
            n
        })
    });
    group.bench_function("copy_fragments", |b| {
        b.iter(|| {
            let mut buffers = vec![Vec::<u8>::new(); 8];
            for chunk in &chunks {
                if let Some((index, s)) = fragment(black_box(chunk))
                    && let Some(buffer) = buffers.get_mut((index % 8) as usize)
                {
                    buffer.extend_from_slice(s);
                }
            }
            buffers
        })
    });
    group.finish();
}

criterion_group!(benches, assembler);
criterion_main!(benches);
