//! Which API versions the local kube-apiservers serve. Users run Kubernetes 1.28–1.34, which
//! no longer serve the beta APIs removed in 1.22 and 1.25; the local clusters are v1.20, which
//! still do. The [`ApiSurface::Current`] profile turns those betas off, so that code leaning on
//! one fails here as it would on a current cluster — except where v1.20 has no GA
//! replacement yet (listed in [`KEPT_WITHOUT_REPLACEMENT`]): those stay on, and what depends
//! on them is not checked by this profile.

/// The API surface of every kube-apiserver of an environment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApiSurface {
    /// What Kubernetes 1.25+ still serves (as far as v1.20 can emulate it): the beta
    /// versions removed in 1.22 and 1.25 are off. The default.
    #[default]
    Current,
    /// Everything the kube-apiserver serves by default (v1.20's own surface).
    Legacy,
}

/// Beta group/versions removed in Kubernetes 1.22 or 1.25 that v1.20 can turn off: each has
/// a GA version in v1.20.
pub const REMOVED_BETAS: [&str; 15] = [
    // Removed in 1.22.
    "admissionregistration.k8s.io/v1beta1",
    "apiextensions.k8s.io/v1beta1",
    "apiregistration.k8s.io/v1beta1",
    "authentication.k8s.io/v1beta1",
    "authorization.k8s.io/v1beta1",
    "certificates.k8s.io/v1beta1",
    "coordination.k8s.io/v1beta1",
    "extensions/v1beta1",
    "networking.k8s.io/v1beta1",
    "rbac.authorization.k8s.io/v1beta1",
    "scheduling.k8s.io/v1beta1",
    "storage.k8s.io/v1beta1",
    // Removed in 1.25.
    "events.k8s.io/v1beta1",
    "autoscaling/v2beta1",
    "node.k8s.io/v1beta1",
];

/// Beta group/versions removed in 1.25 that stay on: v1.20 has no GA version of them yet
/// (CronJob, EndpointSlice and PodDisruptionBudget became GA in 1.21, autoscaling/v2 in
/// 1.23, removing v2beta2 in 1.26).
pub const KEPT_WITHOUT_REPLACEMENT: [&str; 4] = [
    "batch/v1beta1",
    "discovery.k8s.io/v1beta1",
    "policy/v1beta1",
    "autoscaling/v2beta2",
];

/// Environment variable that picks the surface when the options do not: `legacy` or
/// `current`.
pub const SURFACE_ENV: &str = "FLOTILLA_API_SURFACE";

impl ApiSurface {
    /// The surface named by [`SURFACE_ENV`], or the default.
    pub fn from_env() -> Self {
        Self::parse(std::env::var(SURFACE_ENV).ok().as_deref())
    }

    fn parse(value: Option<&str>) -> Self {
        match value.map(str::trim) {
            Some(v) if v.eq_ignore_ascii_case("legacy") => ApiSurface::Legacy,
            _ => ApiSurface::Current,
        }
    }

    /// The kube-apiserver arguments of this surface.
    pub fn apiserver_args(self) -> Vec<String> {
        match self {
            ApiSurface::Legacy => Vec::new(),
            ApiSurface::Current => {
                let off: Vec<String> = REMOVED_BETAS
                    .iter()
                    .map(|gv| format!("{gv}=false"))
                    .collect();
                vec![format!("--runtime-config={}", off.join(","))]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_surface_turns_off_every_removed_beta_that_has_a_ga_version() {
        let args = ApiSurface::Current.apiserver_args();
        assert_eq!(args.len(), 1);
        for gv in REMOVED_BETAS {
            assert!(args[0].contains(&format!("{gv}=false")), "{gv}");
        }
        for gv in KEPT_WITHOUT_REPLACEMENT {
            assert!(!args[0].contains(gv), "{gv} has no GA version in v1.20");
        }
    }

    #[test]
    fn the_legacy_surface_adds_nothing_and_is_chosen_only_by_name() {
        assert!(ApiSurface::Legacy.apiserver_args().is_empty());
        assert_eq!(ApiSurface::parse(Some("legacy")), ApiSurface::Legacy);
        assert_eq!(ApiSurface::parse(Some(" LEGACY ")), ApiSurface::Legacy);
        assert_eq!(ApiSurface::parse(Some("current")), ApiSurface::Current);
        assert_eq!(ApiSurface::parse(None), ApiSurface::Current);
    }
}
