//! Local federations and benchmarks: `flotilla dev` ([`bootstrap`]) and `flotilla bench`
//! ([`bench`]) on real local clusters from `flotilla-localenv`.

#![forbid(unsafe_code)]

pub mod bench;
pub mod bootstrap;
