#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs (Debian packages and the
# Kubernetes binaries, cached outside the repository), then formatting, lints, unit tests and
# the integration / end-to-end tests on real local clusters.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
# CI builds once from a clean clone: incremental compilation's caches would only take disk
# (several GB beside the build itself), so it is off there.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"; fi
echo "[test] free disk: $(df -h --output=avail . | tail -1 | tr -d ' ')" >&2
export KUBE_BIN_DIR="$(bash scripts/install-k8s.sh)"
echo "[test] Kubernetes binaries: $KUBE_BIN_DIR" >&2

# The dashboard's end-to-end test drives a real headless browser: Debian's Chromium and its
# WebDriver (chromedriver), installed with apt as install-k8s.sh installs its packages. The
# alert tests (tests/tests/alerts.rs) run Debian's `prometheus` and its `promtool`.
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
missing=()
for p in chromium chromium-driver prometheus; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[test] apt-get install ${missing[*]}" >&2
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
fi

# The documentation site (tests/tests/docs_site.rs) is built with mdBook, from crates.io.
if ! command -v mdbook >/dev/null 2>&1; then
  echo "[test] cargo install mdbook --locked" >&2
  cargo install mdbook --locked --no-default-features >&2
fi

echo "[test] cargo fmt --check" >&2
cargo fmt --all -- --check
echo "[test] cargo clippy" >&2
cargo clippy --workspace --all-targets -- -D warnings
echo "[test] crdgen --check (committed YAML matches the code)" >&2
cargo run -q -p flotilla-api --bin crdgen -- --check
echo "[test] crdcompat (the CRDs stay compatible with the last released ones, config/crds-compat/)" >&2
cargo run -q -p flotilla-api --bin crdcompat

# Tests on real clusters wait on API servers more than they compute, so a few run at once.
# A test that fails is run once more (nextest reports it as FLAKY if the retry passes), so a
# timing hiccup on a loaded 2-core machine does not sink a run (.config/nextest.toml);
# FLOTILLA_TEST_RETRIES=0 disables retries.
if cargo nextest --version >/dev/null 2>&1; then
  retries=()
  if [ -n "${FLOTILLA_TEST_RETRIES:-}" ]; then retries=(--retries "$FLOTILLA_TEST_RETRIES"); fi
  cargo nextest run --workspace --no-fail-fast --test-threads "${FLOTILLA_TEST_THREADS:-4}" \
    "${retries[@]}"
  # nextest skips doctests
  cargo test --workspace --doc
else
  cargo test --workspace --no-fail-fast -- --test-threads "${FLOTILLA_TEST_THREADS:-4}"
fi
