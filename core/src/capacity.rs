//! The room in a member cluster, computed from its nodes and pods without I/O: Kubernetes
//! quantities ([`quantity_millis`]), a member's resource summary ([`summary`]), how many
//! replicas of a pod template fit its nodes ([`available_replicas`], Flotilla's
//! `weightPreference: AvailableReplicas`, as Karmada's general estimator counts them), and
//! kubefed's capacity estimate from pods left unschedulable ([`estimated_capacity`]).
//!
//! Callers hand in what their caches hold and the time; nothing here watches or reads a
//! clock.

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_api::core::ClusterResources;
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;

/// A quantity in thousandths of its unit (`"500m"` → 500, `"1Ki"` → 1 024 000), rounded
/// up; `None` when it is not a Kubernetes quantity.
pub fn quantity_millis(q: &str) -> Option<i128> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let (mantissa, exponent) = parse_decimal(number)?;
    let (base, power): (i128, i32) = match suffix {
        "" => (1, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        s if s.starts_with(['e', 'E']) => (1, s[1..].parse().ok()?),
        _ => return None,
    };
    // mantissa × 10^(exponent + power + 3) × base, rounded up.
    let scale = exponent + power + 3;
    let value = mantissa.checked_mul(base)?;
    if scale >= 0 {
        value.checked_mul(10i128.checked_pow(u32::try_from(scale).ok()?)?)
    } else {
        let div = 10i128.checked_pow(u32::try_from(-scale).ok()?)?;
        Some((value + div - 1).div_euclid(div))
    }
}

/// `"12.5"` → (125, -1).
fn parse_decimal(s: &str) -> Option<(i128, i32)> {
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let digits = format!("{int}{frac}");
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let m: i128 = digits.parse().ok()?;
    let exp = -i32::try_from(frac.len()).ok()?;
    Some((if negative { -m } else { m }, exp))
}

/// CPU (millicores), memory (bytes) and pods: what nodes offer and pods request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// Millicores.
    pub cpu_millis: i128,
    /// Bytes.
    pub memory_bytes: i128,
    /// Pods.
    pub pods: i128,
}

impl Resources {
    fn add(&mut self, other: &Resources) {
        self.cpu_millis += other.cpu_millis;
        self.memory_bytes += other.memory_bytes;
        self.pods += other.pods;
    }

    fn sub(&self, other: &Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis - other.cpu_millis,
            memory_bytes: self.memory_bytes - other.memory_bytes,
            pods: self.pods - other.pods,
        }
    }

    fn from_map(map: Option<&BTreeMap<String, Quantity>>, pods: i128) -> Resources {
        let get = |k: &str| {
            map.and_then(|m| m.get(k))
                .and_then(|q| quantity_millis(&q.0))
                .unwrap_or(0)
        };
        Resources {
            cpu_millis: get("cpu"),
            memory_bytes: get("memory") / 1000,
            pods: if pods < 0 { get("pods") / 1000 } else { pods },
        }
    }

    /// As a status map: `cpu` (`"3500m"`), `memory` (`"1536Mi"`), `pods`.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("cpu".to_owned(), format_cpu(self.cpu_millis)),
            ("memory".to_owned(), format_memory(self.memory_bytes)),
            ("pods".to_owned(), self.pods.to_string()),
        ])
    }
}

/// Millicores as a quantity: `"2"`, `"3500m"`.
pub fn format_cpu(millis: i128) -> String {
    if millis % 1000 == 0 {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// Bytes as a quantity in the largest binary unit that divides them: `"1536Mi"`.
pub fn format_memory(bytes: i128) -> String {
    for (suffix, shift) in [("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        if bytes != 0 && bytes % (1 << shift) == 0 {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// What one pod requests, as the scheduler counts it: the sum of its containers' requests
/// or, when larger, its largest init container's, plus its overhead; one pod.
pub fn pod_requests(spec: &PodSpec) -> Resources {
    let of = |r: Option<&k8s_openapi::api::core::v1::ResourceRequirements>| {
        Resources::from_map(r.and_then(|r| r.requests.as_ref()), 0)
    };
    let mut sum = Resources::default();
    for c in &spec.containers {
        sum.add(&of(c.resources.as_ref()));
    }
    for c in spec.init_containers.iter().flatten() {
        let init = of(c.resources.as_ref());
        sum.cpu_millis = sum.cpu_millis.max(init.cpu_millis);
        sum.memory_bytes = sum.memory_bytes.max(init.memory_bytes);
    }
    sum.add(&Resources::from_map(spec.overhead.as_ref(), 0));
    sum.pods = 1;
    sum
}

/// Whether a pod holds room on its node: bound, not finished.
fn holds_room(pod: &Pod) -> bool {
    let bound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    bound && !matches!(phase, Some("Succeeded" | "Failed"))
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

fn allocatable(node: &Node) -> Resources {
    Resources::from_map(
        node.status.as_ref().and_then(|s| s.allocatable.as_ref()),
        -1,
    )
}

/// A member's summary: its nodes (and how many are Ready), what they offer, what the pods
/// bound to them request, and how many pods there are.
pub fn summary<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> ClusterResources {
    let (mut count, mut ready, mut offered) = (0, 0, Resources::default());
    for n in nodes {
        count += 1;
        ready += i64::from(is_ready(n));
        offered.add(&allocatable(n));
    }
    let (mut requested, mut total) = (Resources::default(), 0);
    for p in pods {
        total += 1;
        if holds_room(p)
            && let Some(spec) = &p.spec
        {
            requested.add(&pod_requests(spec));
        }
    }
    ClusterResources {
        nodes: count,
        ready_nodes: ready,
        allocatable: offered.to_map(),
        requested: requested.to_map(),
        pods: total,
    }
}

/// Whether `tolerations` tolerate `taint` (the kube-scheduler's rule).
fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let key = t.key.as_deref().unwrap_or("");
        let exists = t.operator.as_deref() == Some("Exists");
        let key_ok = (key.is_empty() && exists) || key == taint.key;
        let value_ok =
            exists || t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("");
        effect_ok && key_ok && value_ok
    })
}

/// Whether a pod of `template` may be placed on `node` at all: Ready, schedulable, its
/// labels matching the template's `nodeSelector`, its `NoSchedule`/`NoExecute` taints
/// tolerated. Affinity is not read.
fn node_admits(node: &Node, template: &PodSpec) -> bool {
    let spec = node.spec.as_ref();
    if !is_ready(node) || spec.and_then(|s| s.unschedulable).unwrap_or(false) {
        return false;
    }
    let labels = node.metadata.labels.as_ref();
    let selected = template
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
    let tolerations = template.tolerations.as_deref().unwrap_or_default();
    let tolerated = spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|t| tolerates(tolerations, t));
    selected && tolerated
}

/// How many more pods of `template` fit `node`, given what is free there.
fn fits(free: &Resources, want: &Resources) -> i128 {
    let per = |free: i128, want: i128| {
        if want > 0 {
            free.max(0) / want
        } else {
            i128::MAX
        }
    };
    per(free.cpu_millis, want.cpu_millis)
        .min(per(free.memory_bytes, want.memory_bytes))
        .min(per(free.pods, 1))
}

/// How many replicas of `template` fit a member: per Ready, schedulable node that admits
/// it, what is allocatable minus what the other pods bound there request, divided by the
/// template's requests; summed. The workload's own pods (`own`) count as room, so its
/// replicas moving in or out do not change the answer.
pub fn available_replicas<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    pods: impl IntoIterator<Item = &'a Pod>,
    template: &PodSpec,
    own: impl Fn(&Pod) -> bool,
) -> i64 {
    let mut used: BTreeMap<&str, Resources> = BTreeMap::new();
    for p in pods {
        if holds_room(p)
            && !own(p)
            && let (Some(node), Some(spec)) = (node_of(p), &p.spec)
        {
            used.entry(node).or_default().add(&pod_requests(spec));
        }
    }
    let want = pod_requests(template);
    let total: i128 = nodes
        .into_iter()
        .filter(|n| node_admits(n, template))
        .map(|n| {
            let name = n.metadata.name.as_deref().unwrap_or_default();
            let free = allocatable(n).sub(used.get(name).unwrap_or(&Resources::default()));
            fits(&free, &want)
        })
        .fold(0i128, i128::saturating_add);
    i64::try_from(total).unwrap_or(i64::MAX)
}

/// Since when a pod has been unschedulable (`PodScheduled=False`, reason `Unschedulable`).
fn unschedulable_since(pod: &Pod) -> Option<Timestamp> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?;
    (c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
        .then(|| c.last_transition_time.as_ref().map(|t| t.0))
        .flatten()
}

/// kubefed's capacity estimate of a member for one workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Estimate {
    /// The workload's replicas the member runs (its pods bound to a node), when some of its
    /// pods have been unschedulable for longer than the threshold; `None`: no cap.
    pub capacity: Option<i64>,
    /// Pods unschedulable for longer than the threshold.
    pub unschedulable: i64,
    /// When the next pod crosses the threshold (time from `now`), to look again then.
    pub recheck_in: Option<Duration>,
}

/// kubefed's capacity estimate from the workload's pods in one member (`pods`, already
/// filtered to the workload): when some have been `PodScheduled=False/Unschedulable` for
/// longer than `threshold`, the member's capacity is what it runs. kubefed computes it as
/// `spec.replicas − unschedulable`; counting the bound pods gives the same once every pod
/// exists, and is not misled by a replica change not propagated yet. Pods being deleted
/// count for nothing.
pub fn estimated_capacity<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    now: Timestamp,
    threshold: Duration,
) -> Estimate {
    let (mut bound, mut over, mut next) = (0i64, 0i64, None::<Duration>);
    for p in pods {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if holds_room(p) {
            bound += 1;
            continue;
        }
        let Some(since) = unschedulable_since(p) else {
            continue;
        };
        let waited = Duration::try_from(now.duration_since(since)).unwrap_or_default();
        if waited > threshold {
            over += 1;
        } else {
            let left = threshold - waited + Duration::from_millis(100);
            next = Some(next.map_or(left, |n| n.min(left)));
        }
    }
    Estimate {
        capacity: (over > 0).then_some(bound),
        unschedulable: over,
        recheck_in: next,
    }
}

#[cfg(test)]
#[path = "capacity_tests.rs"]
mod tests;
