//! Loopback port allocation.
//!
//! Ports come from below the kernel's default ephemeral range (32768–60999), so outgoing
//! connections and `bind(0)` callers do not take them between allocation and use, and one
//! process never hands the same port out twice. A port can still be taken by another
//! process in between; starting code retries with a fresh port when a bind fails.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};
use std::ops::Range;
use std::sync::{Mutex, PoisonError};

use rand::Rng;

use crate::error::Error;

const RANGE: Range<u16> = 20_000..32_000;
const ATTEMPTS: usize = 500;

static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A loopback TCP port that is free right now and was not handed out before by this process.
pub(crate) fn free_port() -> Result<u16, Error> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    let mut rng = rand::rng();
    for _ in 0..ATTEMPTS {
        let port = rng.random_range(RANGE);
        if handed_out.contains(&port) {
            continue;
        }
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            handed_out.insert(port);
            return Ok(port);
        }
    }
    Err(Error::NoFreePort)
}
