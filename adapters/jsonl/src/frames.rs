//! Zstandard frames of a compressed transcript (persistence.md 5.5 PE2–PE4,
//! 6.3 RZ1–RZ6): the structural scan (no decompression), checked decoding of
//! complete frames, best-effort decoding of a torn final frame, and writing
//! one checksummed frame per durable write.

use std::io;

const MAGIC: u32 = 0xFD2F_B528;

/// The result of the structural scan (PE3).
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FrameScan {
    /// Byte ranges of the complete frames, in order.
    pub frames: Vec<std::ops::Range<usize>>,
    /// Where a torn (incomplete) final frame starts.
    pub torn: Option<usize>,
}

fn le(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
}

/// Scans the frame structure from offset 0 (PE3). An error is corruption
/// (bad magic, reserved bits, reserved block type); running out of bytes
/// inside a frame makes it the torn frame.
pub fn scan_frames(bytes: &[u8]) -> Result<FrameScan, String> {
    let mut frames = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        match frame_end(bytes, pos)? {
            Some(end) => {
                frames.push(pos..end);
                pos = end;
            }
            None => {
                return Ok(FrameScan {
                    frames,
                    torn: Some(pos),
                });
            }
        }
    }
    Ok(FrameScan { frames, torn: None })
}

/// The end of the frame starting at `start`, or `None` when the bytes end
/// inside it.
fn frame_end(bytes: &[u8], start: usize) -> Result<Option<usize>, String> {
    let take = |at: usize, n: usize| bytes.get(at..at.checked_add(n)?);
    let Some(magic) = take(start, 4) else {
        return Ok(None);
    };
    if le(magic) != u64::from(MAGIC) {
        return Err(format!("invalid frame magic at byte {start}"));
    }
    let mut pos = start + 4;
    let Some(&desc) = bytes.get(pos) else {
        return Ok(None);
    };
    pos += 1;
    if desc & 0x18 != 0 {
        return Err(format!(
            "reserved frame header descriptor bits set at byte {}",
            start + 4
        ));
    }
    let single_segment = desc & 0x20 != 0;
    let checksum = desc & 0x04 != 0;
    let dict_size = match desc & 0x03 {
        0 => 0,
        1 => 1,
        2 => 2,
        _ => 4,
    };
    let fcs_flag = desc >> 6;
    let fcs_size = match fcs_flag {
        0 if single_segment => 1,
        0 => 0,
        f => 1usize << f,
    };
    let window = usize::from(!single_segment);
    pos += window + dict_size + fcs_size;
    if pos > bytes.len() {
        return Ok(None);
    }
    loop {
        let Some(header) = take(pos, 3) else {
            return Ok(None);
        };
        let h = le(header);
        let last = h & 1 != 0;
        let block_type = (h >> 1) & 3;
        let size = usize::try_from(h >> 3).unwrap_or(usize::MAX);
        let payload = match block_type {
            0 | 2 => size,
            1 => 1,
            _ => return Err(format!("reserved block type at byte {pos}")),
        };
        pos = match (pos + 3).checked_add(payload) {
            Some(p) if p <= bytes.len() => p,
            _ => return Ok(None),
        };
        if last {
            break;
        }
    }
    if checksum {
        pos += 4;
        if pos > bytes.len() {
            return Ok(None);
        }
    }
    Ok(Some(pos))
}

/// Decodes one complete frame, verifying its checksum (RZ2).
pub fn decode_frame(frame: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut decoder = zstd::stream::read::Decoder::with_buffer(frame)?.single_frame();
    io::copy(&mut decoder, &mut out)?;
    Ok(out)
}

/// Decodes as much of a torn frame as the bytes allow, with a streaming,
/// non-finishing decoder (RZ6). Any decoder error yields no plaintext.
pub fn decode_torn(bytes: &[u8]) -> Vec<u8> {
    use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};
    let Ok(mut decoder) = Decoder::new() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut input = InBuffer::around(bytes);
    loop {
        let before = input.pos();
        let mut output = OutBuffer::around(chunk.as_mut_slice());
        if decoder.run(&mut input, &mut output).is_err() {
            return Vec::new();
        }
        let produced = output.pos();
        out.extend_from_slice(chunk.get(..produced).unwrap_or(&[]));
        // Stop when a pass neither consumed input nor filled the buffer.
        if produced < chunk.len() && input.pos() == before {
            break;
        }
    }
    out
}

/// Writes frames: one per durable write, with the content checksum, at the
/// default level (PE2).
pub struct FrameWriter {
    compressor: zstd::bulk::Compressor<'static>,
}

impl FrameWriter {
    /// A writer with a fresh compression context.
    pub fn new() -> io::Result<Self> {
        let mut compressor = zstd::bulk::Compressor::new(zstd::DEFAULT_COMPRESSION_LEVEL)?;
        compressor.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))?;
        Ok(FrameWriter { compressor })
    }

    /// One frame holding `plain`, appended to `out`.
    pub fn frame(&mut self, plain: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        let frame = self.compressor.compress(plain)?;
        out.extend_from_slice(&frame);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(parts: &[&[u8]]) -> Vec<u8> {
        let mut w = FrameWriter::new().unwrap();
        let mut out = Vec::new();
        for p in parts {
            w.frame(p, &mut out).unwrap();
        }
        out
    }

    #[test]
    fn scan_finds_every_frame_and_decodes_them() {
        let bytes = frames(&[b"a\n", b"bb\ncc\n", b"d\n"]);
        let scan = scan_frames(&bytes).unwrap();
        assert_eq!(scan.frames.len(), 3);
        assert_eq!(scan.torn, None);
        assert_eq!(scan.frames[2].end, bytes.len());
        assert_eq!(
            decode_frame(&bytes[scan.frames[1].clone()]).unwrap(),
            b"bb\ncc\n"
        );
    }

    #[test]
    fn every_cut_inside_the_last_frame_is_torn() {
        let bytes = frames(&[b"head\n", b"line one\nline two\n"]);
        let first_end = scan_frames(&bytes).unwrap().frames[0].end;
        for cut in first_end + 1..bytes.len() {
            let scan = scan_frames(&bytes[..cut]).unwrap();
            assert_eq!(scan.frames.len(), 1, "cut {cut}");
            assert_eq!(scan.torn, Some(first_end), "cut {cut}");
        }
        // Fewer than 4 bytes of a frame start are torn too (PE3).
        let scan = scan_frames(&bytes[..first_end + 3]).unwrap();
        assert_eq!(scan.torn, Some(first_end));
    }

    #[test]
    fn bad_magic_is_corruption() {
        let mut bytes = frames(&[b"x\n"]);
        bytes.extend_from_slice(b"garbage!");
        let err = scan_frames(&bytes).unwrap_err();
        assert!(err.starts_with("invalid frame magic at byte"), "{err}");
    }

    #[test]
    fn checksum_failure_is_detected() {
        let text = b"some text that is long enough to be compressed as a block\n".repeat(20);
        let mut bytes = frames(&[&text]);
        let n = bytes.len();
        bytes[n - 1] ^= 0xFF; // the checksum
        assert!(decode_frame(&bytes).is_err());
    }

    #[test]
    fn torn_frame_yields_a_prefix_of_its_plaintext() {
        let text: Vec<u8> = (0..2000)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let bytes = frames(&[&text]);
        let out = decode_torn(&bytes[..bytes.len() - 4]);
        assert!(text.starts_with(&out));
        // A frame header with reserved bits set is a decoder error: nothing.
        assert!(decode_torn(b"\x28\xb5\x2f\xfd\x08\x00\x00").is_empty());
    }
}
