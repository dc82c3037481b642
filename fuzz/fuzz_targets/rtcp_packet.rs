#![no_main]
// The `rtcp_packet` parser of baton::parsers on arbitrary bytes: no panic, no hang, a named error.
libfuzzer_sys::fuzz_target!(|data: &[u8]| baton::parsers::fuzz("rtcp_packet", data));
