#!/usr/bin/env bash
# Builds the Debian bookworm base image every swarm image starts FROM,
# without pulling anything: debootstrap writes a minimal root filesystem
# from the Debian mirror and `docker import` turns it into an image. The
# machines this runs on have a Docker Engine but no registry to pull from.
#
#   deploy/docker/build-base.sh            # tag swarm-base:bookworm
#   SWARM_BASE_IMAGE=my/base:1 deploy/docker/build-base.sh
#
# Env: SWARM_BASE_IMAGE (tag), DEBIAN_MIRROR (default deb.debian.org),
# SWARM_BASE_REBUILD=1 to rebuild a tag that already exists.
# Needs root (debootstrap creates device nodes and chowns files).
set -euo pipefail

tag=${SWARM_BASE_IMAGE:-swarm-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm

# The base changes only when Debian does: an existing tag is reused, so
# repeated image builds skip the few minutes debootstrap takes.
if [[ -z "${SWARM_BASE_REBUILD:-}" ]] && docker image inspect "$tag" >/dev/null 2>&1; then
    echo "base image $tag exists; reusing it (SWARM_BASE_REBUILD=1 rebuilds)"
    exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
    echo "build-base.sh: debootstrap needs root; run it with sudo" >&2
    exit 1
fi
if ! command -v debootstrap >/dev/null; then
    echo "installing debootstrap"
    apt-get install -y --no-install-recommends debootstrap >/dev/null \
        || { apt-get update >/dev/null && apt-get install -y --no-install-recommends debootstrap >/dev/null; }
fi

root=$(mktemp -d "${TMPDIR:-/tmp}/swarm-base.XXXXXX")
trap 'rm -rf "$root"' EXIT

echo "debootstrap --variant=minbase $suite into $root from $mirror"
debootstrap --variant=minbase --include=ca-certificates "$suite" "$root" "$mirror" >"$root.log" 2>&1 \
    || { tail -30 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"

# Security and point-release updates for the packages images add later.
cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb http://deb.debian.org/debian-security $suite-security main
SOURCES
# Images stay small: no recommends, no caches, no docs left behind by apt.
cat >"$root/etc/apt/apt.conf.d/90swarm-slim" <<'APT'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
APT
cat >"$root/etc/dpkg/dpkg.cfg.d/90swarm-nodoc" <<'DPKG'
path-exclude /usr/share/doc/*
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/doc/*/copyright
DPKG
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/tmp/* \
    "$root"/usr/share/doc/*/changelog* "$root"/usr/share/man/*

tar --numeric-owner -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --message "debootstrap --variant=minbase $suite $mirror" \
    - "$tag" >/dev/null
echo "built $tag"
