//! Shared test helpers.
#![forbid(unsafe_code)]
