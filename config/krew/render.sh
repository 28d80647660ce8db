#!/usr/bin/env bash
# Prints config/krew/flotilla.yaml for one release archive: VERSION (without the v), the URI
# the archive is published at, and the archive itself (its sha256 goes into the manifest).
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 VERSION URI ARCHIVE" >&2
  exit 2
fi
version="$1" uri="$2" archive="$3"
tar -tzf "$archive" | grep -qx 'kubectl-flotilla' || {
  echo "$archive has no kubectl-flotilla at its top level" >&2
  exit 1
}
sum="$(sha256sum "$archive" | cut -d' ' -f1)"
sed -e "s|@VERSION@|$version|" -e "s|@URI@|$uri|" -e "s|@SHA256@|$sum|" \
  "$(dirname "$0")/flotilla.yaml"
