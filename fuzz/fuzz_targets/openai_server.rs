#![no_main]
// The `openai_server` parser of baton::parsers on arbitrary bytes: no panic, no hang, a named error.
libfuzzer_sys::fuzz_target!(|data: &[u8]| baton::parsers::fuzz("openai_server", data));
