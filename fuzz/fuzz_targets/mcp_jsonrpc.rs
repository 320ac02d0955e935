//! The MCP client's reader (`plugins/mcp/src/proto.rs`) on arbitrary bytes
//! cut into arbitrary chunks: the line framer with a small cap, the
//! JSON-RPC parser, the handshake check, `tools/list` folding and result
//! rendering. No panic; no line handed on is longer than the cap or holds a
//! newline; an overlong line is reported once and the framer holds nothing
//! of it; the listing never keeps more than its cap.
#![no_main]

use dsh_mcp::proto::{self, Incoming, LineFramer, ToolListing};
use dsh_mcp::render::render_result;
use libfuzzer_sys::fuzz_target;

const CAP: usize = 256;

fuzz_target!(|data: &[u8]| {
    let (cuts, body) = data.split_at(data.len().min(4));
    let mut framer = LineFramer::new(CAP);
    let mut out = Vec::new();
    let mut rest = body;
    let mut i = 0;
    while !rest.is_empty() {
        let n = (*cuts.get(i % cuts.len().max(1)).unwrap_or(&7) as usize % 97 + 1).min(rest.len());
        let (chunk, tail) = rest.split_at(n);
        framer.push(chunk, &mut out);
        assert!(framer.pending() <= CAP);
        rest = tail;
        i += 1;
    }
    let mut listing = ToolListing::new();
    for line in out {
        let Ok(line) = line else { continue };
        assert!(line.len() <= CAP);
        assert!(!line.contains(&b'\n'));
        let Ok(msgs) = proto::parse_line(&line) else { continue };
        for m in msgs {
            if let Incoming::Response { outcome: Ok(result), .. } = m {
                let _ = proto::check_initialize(&result);
                let _ = listing.page(&result);
                let _ = render_result(&result, "t");
            }
        }
    }
    assert!(listing.tools.len() <= proto::MAX_TOOLS_PER_SERVER);
});
