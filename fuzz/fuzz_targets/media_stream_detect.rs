#![no_main]
// The `media_stream_detect` parser of baton::parsers on arbitrary bytes: no panic, no hang, a named error.
libfuzzer_sys::fuzz_target!(|data: &[u8]| baton::parsers::fuzz("media_stream_detect", data));
