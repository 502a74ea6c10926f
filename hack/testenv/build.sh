#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver + etcd) from Go module source
# into a per-user cache, once per pinned version. Prints the folder holding
# both binaries on stdout (everything else goes to stderr).
#
# The cache lives outside the repository so that every clone on the machine
# (CI clones afresh) reuses it. Override it with HCPBOT_TESTENV_DIR.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# Versions are read from the builder modules so there is one place to bump.
modversion() { # go.mod module-path: the required version, single-line or block form
  awk -v m="$2" '($1=="require" && $2==m) {print $3; exit} ($1==m && $2 ~ /^v/) {print $2; exit}' "$1"
}
k8s_version=$(modversion "$here/kube-apiserver/go.mod" k8s.io/kubernetes)
etcd_version=$(modversion "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)
if [ -z "$k8s_version" ] || [ -z "$etcd_version" ]; then
  echo "testenv: cannot read pinned versions from $here/*/go.mod" >&2
  exit 1
fi
cache_root=${HCPBOT_TESTENV_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hcpbot/testenv}
dir="$cache_root/kube-apiserver-$k8s_version-etcd-$etcd_version"
mkdir -p "$dir"
# One builder per cache: concurrent callers (parallel CI jobs, several
# shells) wait for it instead of compiling kube-apiserver side by side.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$dir/.lock"
  if ! flock -n 9; then
    echo "testenv: another build of the control plane is running; waiting for it" >&2
    flock 9
  fi
fi

build() { # name module-dir package
  local name=$1 mod=$2 pkg=$3
  if [ -x "$dir/$name" ]; then
    return 0
  fi
  echo "testenv: building $name from module source into $dir" >&2
  echo "testenv: the first build takes minutes (kube-apiserver ~12 min on 2 cores); later runs reuse it" >&2
  local tmp="$dir/.$name.tmp.$$"
  trap 'rm -f "$tmp"' EXIT
  (cd "$here/$mod" && CGO_ENABLED=0 go build -trimpath -o "$tmp" "$pkg")
  # rename is atomic: an interrupted build never leaves a half-written binary
  mv -f "$tmp" "$dir/$name"
  trap - EXIT
}

build etcd etcd .
build kube-apiserver kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
echo "$dir"
