#!/usr/bin/env bash
# The main job, from a fresh machine: installs what it needs, builds `flotilla`, then runs
# `flotilla dev up` — a local host cluster and member clusters (real etcd, kube-apiserver and
# kube-controller-manager processes on loopback), the Flotilla control plane, and the sample
# federated workload, printing its propagation status. Ctrl-C stops everything.
# Arguments are passed to `flotilla dev up` (e.g. --members 3, --non-interactive).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
export KUBE_BIN_DIR="$(bash scripts/install-k8s.sh)"
cargo build --release -p flotilla-cli --bin flotilla
# `flotilla` itself is not put on the PATH (nothing outside the repository is changed); the
# hints `dev up` prints use this path. To type `flotilla`, add the directory to PATH:
echo "flotilla: $PWD/target/release/flotilla   (export PATH=\"$PWD/target/release:\$PATH\" to type just flotilla)" >&2
exec ./target/release/flotilla dev up --kubeconfig-out "${FLOTILLA_KUBECONFIG:-$PWD/flotilla-dev.kubeconfig}" "$@"
