//! Control plane.
#![forbid(unsafe_code)]
