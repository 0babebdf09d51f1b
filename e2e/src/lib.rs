//! End-to-end tests of the built binaries, in `tests/`. Nothing here: the crate exists so that
//! the tests run the binaries as users do, beside each other, and own no code of theirs.
#![forbid(unsafe_code)]
