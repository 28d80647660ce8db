//! `flotilla bench --compare-bin BEFORE`: two control-plane binaries (the before and the
//! after of a change) measured in one run. The same benchmark is repeated `--rounds` times
//! with each binary as the control plane (a child process, so that its CPU and memory are
//! its own), on fresh clusters every time, in alternating order (before first in odd
//! rounds, after first in even ones) so that a machine growing busier or quieter during the
//! run weighs on both alike. The medians of each side and their ratio (after / before) are
//! reported with every run's figures, so that the spread is visible beside the difference.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tracing::info;

use super::{BenchOptions, BenchReport, ControlPlaneMode, report::ratio};

/// One run's figures of one binary: what a change to the control plane's own CPU moves.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunFigures {
    /// `before` or `after`.
    pub side: String,
    /// The round (from 1).
    pub round: usize,
    /// Control-plane CPU milliseconds per member object (all phases).
    pub cpu_ms_per_member_object: f64,
    /// Control-plane CPU seconds in each phase's window: create, update, delete.
    pub phase_cpu_s: [f64; 3],
    /// Seconds of each phase: create, update, delete.
    pub phase_s: [f64; 3],
    /// P99 latency of each phase, ms.
    pub phase_p99_ms: [f64; 3],
    /// Peak RSS of the controller-manager, MiB.
    pub peak_rss_mib: f64,
    /// The restart with every object propagated: control-plane CPU seconds in its window
    /// (the new process's start-up) and seconds to the first new object in every member.
    #[serde(default)]
    pub restart: [f64; 2],
    /// Member requests per member object on create (equal on both sides when the change
    /// is only CPU).
    pub member_requests_per_member_object: f64,
    /// The machine's load average when the run started.
    pub load_at_start: f64,
}

impl RunFigures {
    /// The figures of `report` (its first kind: the ConfigMaps).
    pub fn of(report: &BenchReport, side: &str, round: usize) -> Self {
        let mut f = RunFigures {
            side: side.into(),
            round,
            cpu_ms_per_member_object: report.cost.control_plane_cpu_ms_per_member_object,
            peak_rss_mib: report.cost.control_plane_peak_rss_mib,
            load_at_start: report.machine.load_at_start,
            ..RunFigures::default()
        };
        if let Some(k) = report.kinds.first() {
            for (i, phase) in [&k.create, &k.update, &k.delete].into_iter().enumerate() {
                f.phase_cpu_s[i] = phase.flotilla.control_plane_cpu_s;
                f.phase_s[i] = phase.flotilla.seconds;
                f.phase_p99_ms[i] = phase.flotilla.latency_ms.p99;
            }
            f.member_requests_per_member_object =
                k.create.flotilla.member_requests_per_member_object;
            f.restart = [k.restart.control_plane_cpu_s, k.restart.first_new_object_s];
        }
        f
    }

    /// The figures compared, with their names, in table order.
    fn columns(&self) -> [(&'static str, f64); 13] {
        let [cc, cu, cd] = self.phase_cpu_s;
        let [rc, rf] = self.restart;
        let [sc, su, sd] = self.phase_s;
        let [pc, pu, pd] = self.phase_p99_ms;
        [
            (
                "control-plane CPU ms per member object",
                self.cpu_ms_per_member_object,
            ),
            ("control-plane CPU s, create", cc),
            ("control-plane CPU s, update", cu),
            ("control-plane CPU s, delete", cd),
            ("create s", sc),
            ("update s", su),
            ("delete s", sd),
            ("create P99 ms", pc),
            ("update P99 ms", pu),
            ("delete P99 ms", pd),
            ("controller peak RSS MiB", self.peak_rss_mib),
            ("control-plane CPU s, restart window", rc),
            ("restart: first new object everywhere s", rf),
        ]
    }
}

/// Both binaries' runs, medians and ratios.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompareReport {
    /// The scenario of every run.
    pub scenario: String,
    /// The binary measured as "before".
    pub before_bin: PathBuf,
    /// The binary measured as "after".
    pub after_bin: PathBuf,
    /// Every run, in the order they ran.
    pub runs: Vec<RunFigures>,
    /// Per figure: its name, the median before, the median after, after / before.
    pub medians: Vec<(String, f64, f64, f64)>,
}

impl CompareReport {
    /// Medians per side and their ratios over `runs`.
    pub fn new(scenario: String, before: &Path, after: &Path, runs: Vec<RunFigures>) -> Self {
        let side =
            |name: &str| -> Vec<&RunFigures> { runs.iter().filter(|r| r.side == name).collect() };
        let (b, a) = (side("before"), side("after"));
        let names = RunFigures::default().columns().map(|(n, _)| n);
        let medians = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mb = median(b.iter().map(|r| r.columns()[i].1).collect());
                let ma = median(a.iter().map(|r| r.columns()[i].1).collect());
                (name.to_string(), mb, ma, ratio(ma, mb))
            })
            .collect();
        CompareReport {
            scenario,
            before_bin: before.to_path_buf(),
            after_bin: after.to_path_buf(),
            runs,
            medians,
        }
    }

    /// The report for people: medians and ratio, then every run.
    pub fn table(&self) -> String {
        let mut s = format!(
            "Flotilla bench {}: before {} / after {}, {} runs alternating\n",
            self.scenario,
            self.before_bin.display(),
            self.after_bin.display(),
            self.runs.len()
        );
        s += &format!(
            "{:<42} {:>12} {:>12} {:>8}\n",
            "median of the runs", "before", "after", "ratio"
        );
        for (name, b, a, r) in &self.medians {
            s += &format!("{name:<42} {b:>12.3} {a:>12.3} {r:>7.3}x\n");
        }
        s += "runs (round side: CPU ms/member object; CPU s create/update/delete; s create/update/delete; load at start)\n";
        for r in &self.runs {
            let [cc, cu, cd] = r.phase_cpu_s;
            let [sc, su, sd] = r.phase_s;
            s += &format!(
                "  {} {:<6}: {:.3}; {cc:.2}/{cu:.2}/{cd:.2}; {sc:.2}/{su:.2}/{sd:.2}; load {:.2}\n",
                r.round, r.side, r.cpu_ms_per_member_object, r.load_at_start
            );
        }
        s
    }
}

/// The median (mean of the middle two for an even count; 0 for none).
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// Which side runs first in `round` (from 1): before in odd rounds, after in even ones.
fn order(round: usize) -> [&'static str; 2] {
    if !round.is_multiple_of(2) {
        ["before", "after"]
    } else {
        ["after", "before"]
    }
}

/// Runs the comparison: `opts.compare_bin` is "before", the control plane `opts` would run
/// otherwise is "after". Writes the JSON report to `opts.json` when set.
pub async fn run(opts: BenchOptions) -> anyhow::Result<CompareReport> {
    let before = opts
        .compare_bin
        .clone()
        .context("--compare-bin names the binary to compare with")?;
    let mut single = opts.clone();
    single.compare_bin = None;
    single.json = None;
    single.control_plane = ControlPlaneMode::Process;
    let after = single.control_plane_binary()?.context(
        "a comparison runs both control planes as processes: give --flotilla-bin, or run it from the flotilla binary",
    )?;
    let rounds = opts.rounds.max(1);
    let mut runs = Vec::new();
    for round in 1..=rounds {
        for side in order(round) {
            let bin = if side == "before" { &before } else { &after };
            info!(round, side, bin = %bin.display(), "comparison run");
            let mut o = single.clone();
            o.flotilla_bin = Some(bin.clone());
            let report = super::run(o)
                .await
                .with_context(|| format!("round {round}, {side} ({})", bin.display()))?;
            runs.push(RunFigures::of(&report, side, round));
        }
    }
    let (scenario, _, _) = opts.resolved();
    let report = CompareReport::new(scenario, &before, &after, runs);
    super::write_json(opts.json.as_deref(), &report)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(side: &str, round: usize, cpu: f64, create_s: f64) -> RunFigures {
        RunFigures {
            side: side.into(),
            round,
            cpu_ms_per_member_object: cpu,
            phase_s: [create_s, 1.0, 1.0],
            ..RunFigures::default()
        }
    }

    /// The medians' row of the figure `name`.
    fn median_named<'a>(report: &'a CompareReport, name: &str) -> &'a (String, f64, f64, f64) {
        report
            .medians
            .iter()
            .find(|m| m.0 == name)
            .unwrap_or_else(|| panic!("no figure {name}"))
    }

    #[test]
    fn the_sides_alternate_which_goes_first() {
        assert_eq!(order(1), ["before", "after"]);
        assert_eq!(order(2), ["after", "before"]);
        assert_eq!(order(3), ["before", "after"]);
    }

    #[test]
    fn medians_are_taken_per_side_and_compared_after_over_before() {
        let runs = vec![
            figures("before", 1, 0.40, 5.0),
            figures("after", 1, 0.30, 4.0),
            figures("after", 2, 0.34, 4.4),
            figures("before", 2, 0.44, 5.2),
            figures("before", 3, 0.38, 9.0),
            figures("after", 3, 0.32, 4.2),
        ];
        let report = CompareReport::new("1000x2".into(), Path::new("b"), Path::new("a"), runs);
        let (name, b, a, r) = &report.medians[0];
        assert_eq!(name, "control-plane CPU ms per member object");
        assert!((b - 0.40).abs() < 1e-9 && (a - 0.32).abs() < 1e-9);
        assert!((r - 0.8).abs() < 1e-9);
        let create = median_named(&report, "create s");
        assert!(
            (create.1 - 5.2).abs() < 1e-9,
            "one slow run does not move the median"
        );
        assert!((create.2 - 4.2).abs() < 1e-9);
        let table = report.table();
        assert!(table.contains("6 runs alternating"), "{table}");
        assert!(table.contains("0.800x"), "{table}");
    }

    #[test]
    fn the_restart_figures_are_compared_too() {
        let mut before = figures("before", 1, 0.4, 5.0);
        before.restart = [4.0, 3.0];
        let mut after = figures("after", 1, 0.4, 5.0);
        after.restart = [2.0, 3.0];
        let report = CompareReport::new(
            "10000x2".into(),
            Path::new("b"),
            Path::new("a"),
            vec![before, after],
        );
        let cpu = median_named(&report, "control-plane CPU s, restart window");
        assert!((cpu.3 - 0.5).abs() < 1e-9);
        let first = median_named(&report, "restart: first new object everywhere s");
        assert!((first.3 - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0, 10.0]), 2.5);
        assert_eq!(median(vec![7.0]), 7.0);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
