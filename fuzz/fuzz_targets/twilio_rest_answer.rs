#![no_main]
// The `twilio_rest_answer` parser of baton::parsers on arbitrary bytes: no panic, no hang, a named error.
libfuzzer_sys::fuzz_target!(|data: &[u8]| baton::parsers::fuzz("twilio_rest_answer", data));
