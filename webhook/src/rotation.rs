//! When the webhook's certificates change, as pure decisions over what the Secret holds and
//! the time: renew the serving certificate at 2/3 of its life, roll the CA over in three
//! steps so the API server never meets a certificate it cannot verify (publish the next CA
//! beside the current one, switch the serving certificate to it after an overlap, drop the
//! old CA after another), and which CA bundle to publish. No I/O here: [`super::renew`]
//! reads, applies and publishes.

use std::time::Duration;

/// Lifetimes and waits of the rotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Lifetime of a CA.
    pub ca_lifetime: Duration,
    /// Lifetime of a serving certificate (cut to its CA's end).
    pub cert_lifetime: Duration,
    /// How long a CA bundle change is given to reach the API server (and every replica to
    /// load a new serving certificate) before the next step relies on it.
    pub overlap: Duration,
    /// How often each replica looks at the Secret.
    pub check_every: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        const DAY: u64 = 24 * 3600;
        Self {
            ca_lifetime: Duration::from_secs(365 * DAY),
            cert_lifetime: Duration::from_secs(30 * DAY),
            overlap: Duration::from_secs(5 * 60),
            check_every: Duration::from_secs(60),
        }
    }
}

impl Policy {
    /// The policy the controller-manager's flags give: each replica looks every fifth of
    /// the overlap, at most every minute.
    pub fn from_flags(ca_lifetime: Duration, cert_lifetime: Duration, overlap: Duration) -> Self {
        Self {
            ca_lifetime,
            cert_lifetime,
            overlap,
            check_every: (overlap / 5).min(Duration::from_secs(60)),
        }
    }

    /// The reason this policy cannot rotate without a window in which admission fails.
    ///
    /// The one rule (docs/serviceaccountimport.md, "Certificate rotation", states it in
    /// the same words): the overlap must be at least three check intervals, and the CA's
    /// last third must hold two overlaps (the CA lifetime at least six overlaps). The old
    /// CA's certificate is served until every replica has looked after the switch: a look
    /// to stage the next CA, one overlap, a look to switch, a look to reload — at most one
    /// overlap and three looks after the CA's 2/3 point, which two overlaps of at least
    /// three looks each hold.
    pub fn check(&self) -> Result<(), String> {
        if self.check_every.is_zero() || self.cert_lifetime.is_zero() {
            return Err("the certificate lifetime and the check interval must be positive".into());
        }
        if self.overlap < self.check_every * 3 {
            return Err(format!(
                "the overlap ({:?}) must be at least three check intervals ({:?}): staging, switching and reloading each wait for a replica's look",
                self.overlap, self.check_every
            ));
        }
        // The last third of a certificate's life is the time left to renew it.
        if self.cert_lifetime / 3 <= self.check_every {
            return Err(format!(
                "the certificate lifetime ({:?}) must exceed three check intervals ({:?})",
                self.cert_lifetime, self.check_every
            ));
        }
        if self.ca_lifetime < self.overlap * 6 {
            return Err(format!(
                "the CA lifetime ({:?}) must be at least six overlaps ({:?}): its last third must hold two overlaps of {:?}",
                self.ca_lifetime,
                self.overlap * 6,
                self.overlap
            ));
        }
        if self.cert_lifetime > self.ca_lifetime {
            return Err("the certificate lifetime must not exceed the CA lifetime".into());
        }
        Ok(())
    }
}

/// When a certificate was issued and when it expires, in Unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// Issued at.
    pub issued: i64,
    /// Not valid from this second on.
    pub expires: i64,
}

impl Validity {
    /// From `issued`, for `lifetime`, but never past `cap` (a certificate outliving its CA
    /// would fail verification anyway).
    pub fn starting(issued: i64, lifetime: Duration, cap: Option<i64>) -> Self {
        let end = issued.saturating_add(i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX));
        Self {
            issued,
            expires: cap.map_or(end, |c| end.min(c)),
        }
    }

    /// The second from which it is due for renewal: 2/3 of its life.
    pub fn renew_at(&self) -> i64 {
        let life = self.expires.saturating_sub(self.issued).max(0);
        self.issued
            .saturating_add(life / 3 * 2 + (life % 3) * 2 / 3)
    }
}

/// What the Secret holds, reduced to what the decisions need.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// The current CA, when there is one (absent: nothing is trusted yet).
    pub ca: Option<Validity>,
    /// Whether the current CA's key is stored (a Secret written before rotation existed
    /// holds none, so its CA must be rolled over to sign anything new).
    pub ca_can_sign: bool,
    /// The serving certificate, when there is one made for the configured names.
    pub serving: Option<Validity>,
    /// When the next CA was published beside the current one, while a rollover runs.
    pub next_staged_at: Option<i64>,
    /// Whether the MutatingWebhookConfiguration's every webhook trusts the next CA.
    pub next_published: bool,
    /// When the previous CA stopped signing, while it is still trusted.
    pub previous_retired_at: Option<i64>,
}

/// The one change to make now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to change before this second.
    Keep {
        /// The next second something may be due.
        until: i64,
    },
    /// A new CA and serving certificate at once: there is no CA, or it has expired, so
    /// there is nothing admission could keep verifying during a rollover.
    Bootstrap,
    /// A new serving certificate signed by the current CA (the bundle stays).
    IssueServing,
    /// Generate the next CA and trust it beside the current one.
    StageCa,
    /// Serve a certificate of the next CA, which becomes current; the old CA stays trusted.
    SwitchCa,
    /// Stop trusting the previous CA.
    DropPrevious,
}

impl Step {
    /// The step's name in logs and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Step::Keep { .. } => "keep",
            Step::Bootstrap => "bootstrap",
            Step::IssueServing => "issue-serving",
            Step::StageCa => "stage-ca",
            Step::SwitchCa => "switch-ca",
            Step::DropPrevious => "drop-previous-ca",
        }
    }
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// The change due at `now`. One at a time: each is written, then looked at again.
pub fn decide(observed: &Observed, policy: &Policy, now: i64) -> Step {
    let Some(ca) = observed.ca.filter(|ca| ca.expires > now) else {
        return Step::Bootstrap;
    };
    let overlap = secs(policy.overlap);
    let serving_due = observed.serving.is_none_or(|s| s.renew_at() <= now);
    if serving_due && !observed.ca_can_sign && observed.next_staged_at.is_none() {
        // Nothing to sign with and no rollover to wait for: admission is not served by a
        // certificate this CA can vouch for again.
        return Step::Bootstrap;
    }
    let mut until = ca.expires;
    if let Some(retired) = observed.previous_retired_at {
        if now >= retired.saturating_add(overlap) {
            return Step::DropPrevious;
        }
        until = until.min(retired.saturating_add(overlap));
    }
    match observed.next_staged_at {
        Some(staged) if now >= staged.saturating_add(overlap) && observed.next_published => {
            return Step::SwitchCa;
        }
        Some(staged) => until = until.min(staged.saturating_add(overlap)),
        // A second rollover waits for the first one's old CA to be dropped.
        None if observed.previous_retired_at.is_none()
            && (!observed.ca_can_sign || now >= ca.renew_at()) =>
        {
            return Step::StageCa;
        }
        // Due but waiting for the drop above, which `until` already counts.
        None if ca.renew_at() <= now => {}
        None => until = until.min(ca.renew_at()),
    }
    if serving_due && observed.ca_can_sign {
        return Step::IssueServing;
    }
    if let Some(s) = observed.serving {
        until = until.min(s.renew_at());
    }
    Step::Keep {
        until: until.max(now),
    }
}

/// The CA bundle to publish: every CA a serving certificate may chain to now or after the
/// step in flight — the previous one until it is dropped, the current one, the next one
/// once staged.
pub fn bundle(previous: Option<&str>, current: &str, next: Option<&str>) -> String {
    let mut out = String::new();
    for pem in previous.into_iter().chain([current]).chain(next) {
        out.push_str(pem.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            ca_lifetime: Duration::from_secs(300),
            cert_lifetime: Duration::from_secs(90),
            overlap: Duration::from_secs(10),
            check_every: Duration::from_secs(1),
        }
    }

    fn steady() -> Observed {
        Observed {
            ca: Some(Validity::starting(0, Duration::from_secs(300), None)),
            ca_can_sign: true,
            serving: Some(Validity::starting(0, Duration::from_secs(90), Some(300))),
            ..Observed::default()
        }
    }

    #[test]
    fn an_empty_secret_bootstraps_a_ca_and_a_certificate() {
        assert_eq!(decide(&Observed::default(), &policy(), 5), Step::Bootstrap);
    }

    #[test]
    fn a_fresh_certificate_is_kept_until_two_thirds_of_its_life() {
        assert_eq!(decide(&steady(), &policy(), 10), Step::Keep { until: 60 });
        assert_eq!(decide(&steady(), &policy(), 59), Step::Keep { until: 60 });
        assert_eq!(decide(&steady(), &policy(), 60), Step::IssueServing);
    }

    #[test]
    fn a_certificate_for_other_names_or_none_is_issued_at_once() {
        let o = Observed {
            serving: None,
            ..steady()
        };
        assert_eq!(decide(&o, &policy(), 10), Step::IssueServing);
    }

    #[test]
    fn the_ca_rolls_over_stage_then_switch_then_drop() {
        let p = policy();
        // 2/3 of the CA's 300 s: the next CA is staged.
        let mut o = Observed {
            serving: Some(Validity::starting(180, Duration::from_secs(90), Some(300))),
            ..steady()
        };
        assert_eq!(decide(&o, &p, 200), Step::StageCa);
        o.next_staged_at = Some(200);
        assert_eq!(decide(&o, &p, 205), Step::Keep { until: 210 });
        // The overlap has passed but the bundle is not out: no switch.
        assert_eq!(decide(&o, &p, 215), Step::Keep { until: 215 });
        o.next_published = true;
        assert_eq!(decide(&o, &p, 215), Step::SwitchCa);
        // Switched: the new CA is current, the old one retired at 215.
        let o = Observed {
            ca: Some(Validity::starting(215, Duration::from_secs(300), None)),
            ca_can_sign: true,
            serving: Some(Validity::starting(215, Duration::from_secs(90), Some(515))),
            next_staged_at: None,
            next_published: false,
            previous_retired_at: Some(215),
        };
        assert_eq!(decide(&o, &p, 220), Step::Keep { until: 225 });
        assert_eq!(decide(&o, &p, 225), Step::DropPrevious);
    }

    #[test]
    fn the_serving_certificate_is_renewed_while_a_ca_rollover_waits() {
        let o = Observed {
            next_staged_at: Some(200),
            next_published: true,
            serving: Some(Validity::starting(100, Duration::from_secs(90), Some(300))),
            ..steady()
        };
        assert_eq!(decide(&o, &policy(), 205), Step::IssueServing);
    }

    #[test]
    fn an_expired_ca_is_replaced_at_once() {
        assert_eq!(decide(&steady(), &policy(), 300), Step::Bootstrap);
    }

    #[test]
    fn a_ca_without_its_key_is_rolled_over_not_replaced() {
        // A Secret from before rotation: CA and certificate, no CA key.
        let o = Observed {
            ca_can_sign: false,
            ..steady()
        };
        assert_eq!(decide(&o, &policy(), 10), Step::StageCa);
        let staged = Observed {
            next_staged_at: Some(10),
            next_published: true,
            ..o
        };
        assert_eq!(decide(&staged, &policy(), 12), Step::Keep { until: 20 });
        assert_eq!(decide(&staged, &policy(), 20), Step::SwitchCa);
    }

    #[test]
    fn a_ca_without_its_key_and_no_certificate_is_replaced() {
        let o = Observed {
            ca_can_sign: false,
            serving: None,
            ..steady()
        };
        assert_eq!(decide(&o, &policy(), 10), Step::Bootstrap);
    }

    #[test]
    fn a_second_rollover_waits_for_the_first_old_ca_to_go() {
        let o = Observed {
            previous_retired_at: Some(195),
            serving: Some(Validity::starting(195, Duration::from_secs(90), Some(300))),
            ..steady()
        };
        assert_eq!(decide(&o, &policy(), 200), Step::Keep { until: 205 });
        assert_eq!(decide(&o, &policy(), 205), Step::DropPrevious);
    }

    #[test]
    fn a_certificate_never_outlives_its_ca() {
        let v = Validity::starting(250, Duration::from_secs(90), Some(300));
        assert_eq!(v.expires, 300);
        assert_eq!(v.renew_at(), 250 + 33);
    }

    #[test]
    fn the_bundle_lists_previous_current_and_next() {
        let b = bundle(Some("P\n"), "C", Some("N"));
        assert_eq!(b, "P\nC\nN\n");
        assert_eq!(bundle(None, "C\n", None), "C\n");
    }

    fn flags(ca: f64, overlap: u64) -> Result<(), String> {
        let hour = Duration::from_secs(3600);
        Policy::from_flags(
            Duration::from_secs_f64(ca),
            hour.min(Duration::from_secs_f64(ca)),
            Duration::from_secs(overlap),
        )
        .check()
    }

    #[test]
    fn a_ca_whose_last_third_holds_two_overlaps_is_accepted_and_one_just_short_refused() {
        // 39 s with 6 s: the last third (13 s) holds two overlaps (12 s).
        assert_eq!(flags(39.0, 6), Ok(()));
        // The boundary: exactly two overlaps.
        assert_eq!(flags(36.0, 6), Ok(()));
        let refused = flags(35.9, 6).expect_err("a last third shorter than two overlaps");
        assert!(
            refused.contains("must be at least six overlaps (36s)")
                && refused.contains("last third must hold two overlaps of 6s"),
            "{refused}"
        );
        // The defaults hold it by far.
        assert_eq!(flags(8760.0 * 3600.0, 300), Ok(()));
    }

    #[test]
    fn an_overlap_of_fewer_than_three_looks_is_refused() {
        let base = Policy {
            ca_lifetime: Duration::from_secs(600),
            cert_lifetime: Duration::from_secs(90),
            overlap: Duration::from_secs(3),
            check_every: Duration::from_secs(1),
        };
        assert_eq!(base.check(), Ok(()));
        let short = Policy {
            overlap: Duration::from_millis(2999),
            ..base
        };
        let refused = short.check().expect_err("fewer than three looks");
        assert!(
            refused.contains("at least three check intervals"),
            "{refused}"
        );
    }

    #[test]
    fn policies_that_cannot_roll_over_in_time_are_refused_with_a_reason() {
        assert!(policy().check().is_ok());
        assert!(Policy::default().check().is_ok());
        let short_overlap = Policy {
            overlap: Duration::from_secs(1),
            ..policy()
        };
        assert!(
            short_overlap
                .check()
                .err()
                .unwrap_or_default()
                .contains("overlap")
        );
        let short_ca = Policy {
            ca_lifetime: Duration::from_secs(59),
            ..policy()
        };
        assert!(
            short_ca
                .check()
                .err()
                .unwrap_or_default()
                .contains("CA lifetime")
        );
        let long_cert = Policy {
            cert_lifetime: Duration::from_secs(400),
            ca_lifetime: Duration::from_secs(300),
            ..policy()
        };
        assert!(long_cert.check().is_err());
        let tiny = Policy {
            cert_lifetime: Duration::from_secs(2),
            ..policy()
        };
        assert!(
            tiny.check()
                .err()
                .unwrap_or_default()
                .contains("three check intervals")
        );
    }
}
