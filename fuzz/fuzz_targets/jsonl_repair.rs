//! Arbitrary bytes through the JSONL header reader, line scanner and crash
//! repair: no panic; the canonical-line templates agree with the general
//! path; whatever `load_log` accepts re-validates, and its
//! repaired file loads clean with the same events and round-trips.
#![no_main]

use dsh_core::Session;
use dsh_core::jsonl::{self, Decoded, Decoder, Record};
use libfuzzer_sys::fuzz_target;

const HEADER: &[u8] =
    b"{\"type\":\"session\",\"version\":0,\"id\":\"f\",\"createdAt\":1,\"cwd\":\"/w\",\"delegationDepth\":0}\n";

fuzz_target!(|data: &[u8]| {
    // Half the inputs get a valid header so the scanner sees events.
    let with_header;
    let input: &[u8] = match data.split_first() {
        Some((first, rest)) if first % 2 == 1 => {
            with_header = [HEADER, rest].concat();
            &with_header
        }
        _ => data,
    };
    // Single records: no panic, and a decoded event writes a line that
    // decodes to the same event.
    for line in input.split(|b| *b == b'\n').take(64) {
        // A canonical-line template reads only what the general path reads
        // the same way and what writes back unchanged.
        if let Err(why) = Decoder::template_agrees(line) {
            panic!("{why}");
        }
        if let Ok(Record::One(Decoded::Event(e))) = Decoder::new().decode_line(line) {
            let json = e.to_json();
            match Decoder::new().decode_line(json.as_bytes()) {
                Ok(Record::One(Decoded::Event(back))) => assert_eq!(back, e, "{json}"),
                other => panic!("re-decoding {json}: {other:?}"),
            }
        }
    }
    let _ = jsonl::scan_log(input);
    let Ok(loaded) = jsonl::load_log(input, &[]) else {
        return;
    };
    let events = loaded.session.events().to_vec();
    // Accepted events re-validate as a seed.
    Session::restore(loaded.session.header().clone(), events.clone())
        .expect("accepted events re-validate");
    for pack in [false, true] {
        let repaired = loaded.repaired_bytes(input, pack);
        let again = jsonl::load_log(&repaired, &[]).expect("the repaired log loads");
        assert!(
            !again.needs_repair(),
            "the repaired log is balanced and whole"
        );
        assert_eq!(again.session.events(), &events[..]);
        // Writing the events out again gives the same text.
        let mut a = Vec::new();
        let mut b = Vec::new();
        jsonl::encode_batch(&events, pack, &mut a);
        jsonl::encode_batch(again.session.events(), pack, &mut b);
        assert_eq!(a, b);
    }
});
