//! Flotilla API types.
#![forbid(unsafe_code)]
