#![no_main]
// The `audiosocket_stream` parser of baton::parsers on arbitrary bytes: no panic, no hang, a named error.
libfuzzer_sys::fuzz_target!(|data: &[u8]| baton::parsers::fuzz("audiosocket_stream", data));
