#!/usr/bin/env bash
# Builds Flotilla's OCI image on this machine from nothing that must be pulled: a root
# filesystem assembled here (the `flotilla` binary, exactly the shared libraries it links,
# CA certificates, /etc/passwd and /etc/group with the `nonroot` user 65532), packed by
# umoci as one layer on an empty (`scratch`) image and written as an OCI archive that
# `podman load`, `docker load` and `skopeo copy oci-archive:...` accept.
#
#   bash scripts/image.sh                      # release build --no-default-features (own target dir)
#   bash scripts/image.sh --binary PATH        # package an already built binary
#   bash scripts/image.sh --rootfs DIR --binary PATH   # only the root filesystem (Dockerfile)
#
# Writes target/image/flotilla-<version>.oci.tar (--output DIR moves it) and prints the
# manifest digest and the sizes. Installs what it needs with apt when missing. The image's
# binary is built into target/image-build/, never over target/release/flotilla (the full
# build, with `dev` and `bench`).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NONROOT=65532
ENTRYPOINT=/usr/local/bin/flotilla

binary=""
out_dir="$ROOT/target/image"
rootfs_only=""

usage() {
  sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --output) out_dir="$2"; shift 2 ;;
    --rootfs) rootfs_only="$2"; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "image.sh: unknown argument $1" >&2; usage 2 >&2 ;;
  esac
done

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -n 1)"
[ -n "$version" ] || { echo "image.sh: no version in Cargo.toml" >&2; exit 1; }

# The shared libraries (and the dynamic loader) `$1` needs, one absolute path a line;
# nothing for a static binary.
shared_libraries() {
  local out
  if ! out="$(ldd "$1" 2>&1)"; then
    case "$out" in
      *"not a dynamic executable"*|*"statically linked"*) return 0 ;;
      *) echo "image.sh: ldd $1: $out" >&2; return 1 ;;
    esac
  fi
  if grep -q "not found" <<<"$out"; then
    echo "image.sh: $1 needs libraries this machine lacks:" >&2
    grep "not found" <<<"$out" >&2
    return 1
  fi
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out"
}

# The image's root filesystem in `$1` from the binary `$2`: the layout the Dockerfile
# copies too.
assemble_rootfs() {
  local dir="$1" bin="$2" lib
  rm -rf "$dir"
  mkdir -p "$dir"
  install -D -m 0755 "$bin" "$dir$ENTRYPOINT"
  # Debug sections are not needed to run; a debug build shrinks from ~100 MB to ~30 MB.
  if command -v strip >/dev/null; then strip --strip-debug "$dir$ENTRYPOINT"; fi
  for lib in $(shared_libraries "$bin"); do
    install -D -m 0755 "$(readlink -f "$lib")" "$dir$lib"
  done
  [ -f /etc/ssl/certs/ca-certificates.crt ] || {
    echo "image.sh: /etc/ssl/certs/ca-certificates.crt missing (apt-get install ca-certificates)" >&2
    return 1
  }
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%s:%s:nonroot:/home/nonroot:/sbin/nologin\n' \
    "$NONROOT" "$NONROOT" >"$dir/etc/passwd"
  printf 'root:x:0:\nnonroot:x:%s:\n' "$NONROOT" >"$dir/etc/group"
  printf 'hosts: files dns\n' >"$dir/etc/nsswitch.conf"
  chmod 0644 "$dir/etc/passwd" "$dir/etc/group" "$dir/etc/nsswitch.conf"
  mkdir -p "$dir/home/nonroot" "$dir/tmp" "$dir/root"
  chown "$NONROOT:$NONROOT" "$dir/home/nonroot"
  chmod 0700 "$dir/root"
  chmod 1777 "$dir/tmp"
}

if [ -n "$rootfs_only" ]; then
  [ -n "$binary" ] || { echo "image.sh: --rootfs needs --binary" >&2; exit 2; }
  assemble_rootfs "$rootfs_only" "$binary"
  exit 0
fi

# Tools: umoci packs the image, jq reads its index, ca-certificates is what the image
# trusts, binutils strips debug sections. apt-get update only when something is missing.
missing_tools() {
  missing=()
  command -v umoci >/dev/null || missing+=(umoci)
  command -v jq >/dev/null || missing+=(jq)
  command -v strip >/dev/null || missing+=(binutils)
  [ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
}
install_tools() {
  missing_tools # again: another run may have installed them while this one waited
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "image.sh: installing ${missing[*]} with apt" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=300 update -qq
  apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
missing_tools
if [ ${#missing[@]} -gt 0 ]; then
  # Runs started together (the tests) install one at a time.
  exec 9>/tmp/flotilla-image-apt.lock
  flock 9
  install_tools
  flock -u 9
fi

if [ -z "$binary" ]; then
  # Its own target directory: the same profile and path in target/ would replace the full
  # target/release/flotilla (which `flotilla dev up` and the benchmarks need) with this
  # build without `dev`.
  target_dir="$ROOT/target/image-build"
  echo "image.sh: building flotilla (release, --no-default-features) in $target_dir" >&2
  (cd "$ROOT" && cargo build --release --locked -p flotilla-cli \
    --no-default-features --bin flotilla --target-dir "$target_dir")
  binary="$target_dir/release/flotilla"
fi
[ -x "$binary" ] || { echo "image.sh: $binary is not an executable" >&2; exit 1; }

mkdir -p "$out_dir"
work="$(mktemp -d "$out_dir/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

assemble_rootfs "$work/rootfs" "$binary"

# One layer on an empty image; the same user, entrypoint and command as the Dockerfile.
# The reference `flotilla:<version>` is what `podman load` names the image.
layout="$work/oci"
ref="flotilla:$version"
umoci init --layout "$layout"
umoci new --image "$layout:$ref"
umoci insert --image "$layout:$ref" --history.created_by "scripts/image.sh" \
  "$work/rootfs" /
umoci config --image "$layout:$ref" \
  --config.user "$NONROOT:$NONROOT" \
  --config.entrypoint "$ENTRYPOINT" \
  --config.cmd controller-manager \
  --config.env "PATH=/usr/local/bin:/usr/bin:/bin" \
  --config.env "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
  --config.workingdir / \
  --config.label "org.opencontainers.image.title=flotilla" \
  --config.label "org.opencontainers.image.version=$version" \
  --os linux --architecture amd64
umoci gc --layout "$layout"

archive="$out_dir/flotilla-$version.oci.tar"
tar --sort=name --owner=0 --group=0 --numeric-owner -C "$layout" -cf "$archive.tmp" .
mv "$archive.tmp" "$archive"

manifest="$(jq -r '.manifests[0].digest' "$layout/index.json")"
layers="$(jq -r '[.layers[].size] | add' "$layout/blobs/${manifest/://}")"
echo "image:    $archive ($ref)"
echo "digest:   $manifest"
echo "archive:  $(stat -c %s "$archive") bytes"
echo "layers:   $layers bytes compressed"
echo "rootfs:   $(du -sb "$work/rootfs" | cut -f1) bytes unpacked"
