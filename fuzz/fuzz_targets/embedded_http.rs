//! The embedded runtime's HTTP/1.1 response reader (head parser and body
//! framings) on arbitrary bytes cut at arbitrary points: no panic, and the
//! head and body read are the same whatever the cuts.
//!
//! Input layout (plain bytes, so real responses make good seeds): byte 0
//! gives the number of cuts `n` (mod 16), the next `2n` bytes are the cut
//! points (u16, little endian, taken modulo the response length), and the
//! rest is the response as the server sent it.
#![no_main]

use dsh_embedded::http::{Body, HeadParser, HttpError};
use libfuzzer_sys::fuzz_target;

/// Splits the input into cut points and the response bytes.
fn layout(data: &[u8]) -> (Vec<u16>, &[u8]) {
    let Some((n, rest)) = data.split_first() else {
        return (Vec::new(), data);
    };
    let n = usize::from(n % 16).min(rest.len() / 2);
    let (cuts, bytes) = rest.split_at(2 * n);
    let cuts = cuts
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    (cuts, bytes)
}

/// What a whole response reads as.
#[derive(Debug, PartialEq)]
struct Read {
    /// Status, framing and the headers the runtime keeps.
    head: Option<(u16, String, String)>,
    body: Vec<u8>,
    error: Option<HttpError>,
}

fn read(pieces: &[&[u8]]) -> Read {
    let mut parser = HeadParser::new();
    let mut head = None;
    let mut body: Option<Body> = None;
    let mut data = Vec::new();
    for piece in pieces {
        let mut input: &[u8] = piece;
        if body.is_none() {
            match parser.push(input) {
                Ok(Some((h, used))) => {
                    assert!(used <= input.len(), "consumed past the input");
                    input = &input[used..];
                    head = Some((
                        h.status,
                        format!("{:?}", h.framing),
                        format!(
                            "{:?} {:?} {:?}",
                            h.retry_after, h.x_request_id, h.x_deepseek_request_id
                        ),
                    ));
                    body = Some(Body::new(h.framing));
                }
                Ok(None) => continue,
                Err(e) => {
                    return Read {
                        head,
                        body: data,
                        error: Some(e),
                    };
                }
            }
        }
        let Some(b) = body.as_mut() else { continue };
        while !input.is_empty() {
            let before = input.len();
            match b.next(&mut input) {
                Ok(d) => data.extend_from_slice(d),
                Err(e) => {
                    return Read {
                        head,
                        body: data,
                        error: Some(e),
                    };
                }
            }
            if input.len() == before {
                break;
            }
        }
    }
    let error = match &body {
        None => Some(HttpError::TruncatedHead),
        Some(b) => b.end().err(),
    };
    Read {
        head,
        body: data,
        error,
    }
}

fuzz_target!(|data: &[u8]| {
    let (cuts, bytes) = layout(data);
    let whole = read(&[bytes]);
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|c| usize::from(*c) % (bytes.len() + 1))
        .collect();
    points.sort_unstable();
    let mut pieces: Vec<&[u8]> = Vec::new();
    let mut last = 0;
    for p in points {
        pieces.push(&bytes[last..p]);
        last = p;
    }
    pieces.push(&bytes[last..]);
    assert_eq!(read(&pieces), whole, "cuts changed what was read");
});
