//! The embedded runtime's HTTP/1.1 response reader (head parser and body
//! framings) on arbitrary bytes cut at arbitrary points: no panic, and the
//! head and body read are the same whatever the cuts.
#![no_main]

use arbitrary::Arbitrary;
use dsh_embedded::http::{Body, HeadParser, HttpError};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    bytes: Vec<u8>,
    cuts: Vec<u16>,
}

/// What a whole response reads as.
#[derive(Debug, PartialEq)]
struct Read {
    head: Option<(u16, String)>,
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
                    head = Some((h.status, format!("{:?}", h.framing)));
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

fuzz_target!(|input: Input| {
    let bytes = &input.bytes;
    let whole = read(&[bytes]);
    let mut points: Vec<usize> = input
        .cuts
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
