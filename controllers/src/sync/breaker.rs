//! A circuit breaker per member cluster. A member whose API server accepts connections but
//! never answers (black-holed, overloaded) would otherwise hold every reconcile that
//! touches it for the whole operation timeout — and with a few workers, that stalls
//! propagation to every other member too, until health checks mark it unready. After an
//! operation to a cluster times out (or cannot connect), further operations to it fail at
//! once for a while; then one trial operation is let through, and its success closes the
//! breaker again. The state machine is pure (time is passed in) and unit-tested.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// How long the breaker stays open after the first failure.
const FIRST_OPEN: Duration = Duration::from_secs(2);
/// Longest open period (it doubles per failed trial).
const MAX_OPEN: Duration = Duration::from_secs(30);

/// One cluster's breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Operations pass.
    Closed,
    /// Operations fail at once until `until`; `period` is how long it was opened for.
    Open { until: Instant, period: Duration },
    /// One trial operation is in flight; others fail at once.
    Trial { period: Duration },
}

/// What happened to an operation, as far as the breaker cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Result {
    /// The cluster answered (whatever the answer was).
    Answered,
    /// No answer in time, or no connection.
    NoAnswer,
}

impl State {
    /// Whether an operation may go now, and the state after admitting (or refusing) it.
    /// `Err` carries how long until the next trial.
    pub fn admit(self, now: Instant) -> (std::result::Result<(), Duration>, State) {
        match self {
            State::Closed => (Ok(()), self),
            State::Open { until, period } if now >= until => (Ok(()), State::Trial { period }),
            State::Open { until, .. } => (Err(until - now), self),
            State::Trial { period } => (Err(period), self),
        }
    }

    /// The state after an admitted operation ended.
    pub fn record(self, result: Result, now: Instant) -> State {
        match (self, result) {
            (_, Result::Answered) => State::Closed,
            (State::Closed, Result::NoAnswer) => State::Open {
                until: now + FIRST_OPEN,
                period: FIRST_OPEN,
            },
            (State::Trial { period } | State::Open { period, .. }, Result::NoAnswer) => {
                let period = (period * 2).min(MAX_OPEN);
                State::Open {
                    until: now + period,
                    period,
                }
            }
        }
    }
}

/// Breakers of every member cluster, shared by every type's sync controller.
#[derive(Default)]
pub struct Breakers {
    states: Mutex<HashMap<String, State>>,
}

impl Breakers {
    /// Admits an operation to `cluster`, or says how long until the next trial.
    pub fn admit(&self, cluster: &str) -> std::result::Result<(), Duration> {
        // A map of plain states stays valid after a panic in a holder.
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let state = states.entry(cluster.to_string()).or_insert(State::Closed);
        let (verdict, next) = state.admit(Instant::now());
        *state = next;
        verdict
    }

    /// Records how an admitted operation to `cluster` ended.
    pub fn record(&self, cluster: &str, result: Result) {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let state = states.entry(cluster.to_string()).or_insert(State::Closed);
        *state = state.record(result, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_breaker_lets_operations_through_and_stays_closed_on_answers() {
        let now = Instant::now();
        let (verdict, state) = State::Closed.admit(now);
        assert_eq!(verdict, Ok(()));
        assert_eq!(state.record(Result::Answered, now), State::Closed);
    }

    #[test]
    fn no_answer_opens_the_breaker_and_operations_fail_at_once_until_the_trial() {
        let now = Instant::now();
        let open = State::Closed.record(Result::NoAnswer, now);
        let (verdict, still) = open.admit(now + Duration::from_millis(500));
        assert_eq!(verdict, Err(FIRST_OPEN - Duration::from_millis(500)));
        assert_eq!(still, open);
    }

    #[test]
    fn after_the_open_period_one_trial_goes_and_others_wait_for_it() {
        let now = Instant::now();
        let open = State::Closed.record(Result::NoAnswer, now);
        let (verdict, trial) = open.admit(now + FIRST_OPEN);
        assert_eq!(verdict, Ok(()));
        assert!(matches!(trial, State::Trial { .. }));
        assert!(trial.admit(now + FIRST_OPEN).0.is_err());
        assert_eq!(trial.record(Result::Answered, now), State::Closed);
    }

    #[test]
    fn a_failed_trial_opens_the_breaker_for_twice_as_long_up_to_the_limit() {
        let now = Instant::now();
        let trial = State::Trial { period: FIRST_OPEN };
        assert_eq!(
            trial.record(Result::NoAnswer, now),
            State::Open {
                until: now + FIRST_OPEN * 2,
                period: FIRST_OPEN * 2
            }
        );
        let long = State::Trial { period: MAX_OPEN };
        assert_eq!(
            long.record(Result::NoAnswer, now),
            State::Open {
                until: now + MAX_OPEN,
                period: MAX_OPEN
            }
        );
    }
}
