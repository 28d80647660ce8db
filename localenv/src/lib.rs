//! Local clusters.
#![forbid(unsafe_code)]
