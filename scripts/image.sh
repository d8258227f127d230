#!/usr/bin/env bash
# image.sh — build the task-service container image with podman, no Docker daemon
# and no registry: the binaries are built here (static, CGO_ENABLED=0) and copied
# into a FROM scratch image (scripts/image/Containerfile).
#
#   scripts/image.sh [TAG]     build TAG (default task-service:dev); print TAG
#
# stdout carries only the tag; progress goes to stderr. podman is installed from
# Debian's packages when missing (as root, or through sudo); otherwise the script
# says what to install. On machines whose cgroup mode crun cannot handle, run the
# image with `podman run --runtime runc`.
set -euo pipefail

log() { printf 'image: %s\n' "$*" >&2; }
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tag="${1:-task-service:dev}"

if ! command -v podman >/dev/null; then
	SUDO=""
	if [[ $EUID -ne 0 ]]; then
		command -v sudo >/dev/null || { log "podman is missing: install it as root with  apt-get install -y podman  (Debian 12)"; exit 1; }
		SUDO="sudo"
	fi
	command -v apt-get >/dev/null || { log "podman is missing and this is not a Debian-like system: install podman (or buildah)"; exit 1; }
	log "installing podman (apt-get; about two minutes the first time)"
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc >&2
fi

certs=/etc/ssl/certs/ca-certificates.crt
[[ -r "$certs" ]] || { log "no $certs: install Debian's ca-certificates"; exit 1; }

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
log "building static binaries"
CGO_ENABLED=0 go build -trimpath -buildvcs=auto -ldflags='-s -w' -o "$ctx/" ./cmd/task-service ./cmd/taskctl ./cmd/task-worker
cp scripts/image/Containerfile "$certs" "$ctx/"
mkdir "$ctx/data"
log "podman build -t $tag"
podman build --quiet -t "$tag" -f "$ctx/Containerfile" "$ctx" >&2
log "$tag: $(podman image inspect --format '{{.Size}}' "$tag" | awk '{ printf "%.1f MB", $1 / 1e6 }')"
echo "$tag"
