#!/usr/bin/env bash
# Builds the swarm image (deploy/docker/Dockerfile) from the three
# binaries built on this machine, on the base from build-base.sh (built
# first when missing). Only the binaries and the Dockerfile go into the
# build context, never the repository or target/.
#
#   deploy/docker/build-image.sh                       # release build, tag swarm:latest
#   SWARM_IMAGE=swarm:dev deploy/docker/build-image.sh
#   deploy/docker/build-image.sh --bin-dir target/debug   # binaries already built
#
# Env: SWARM_IMAGE (tag), SWARM_BASE_IMAGE (base tag), CARGO (cargo binary).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
tag=${SWARM_IMAGE:-swarm:latest}
base=${SWARM_BASE_IMAGE:-swarm-base:bookworm}
bins=(swarm-controller swarm-sidecar swarmctl)
bin_dir=

while [[ $# -gt 0 ]]; do
    case $1 in
        --bin-dir) bin_dir=$2; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "build-image.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

SWARM_BASE_IMAGE=$base "$here/build-base.sh"

if [[ -z $bin_dir ]]; then
    (cd "$repo" && "${CARGO:-cargo}" build --release --locked -p swarm-controller -p swarm-sidecar -p swarmctl)
    bin_dir=$repo/target/release
fi

ctx=$(mktemp -d "${TMPDIR:-/tmp}/swarm-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
mkdir "$ctx/bin"
cp "$here/Dockerfile" "$ctx/"
for b in "${bins[@]}"; do
    [[ -x $bin_dir/$b ]] || { echo "build-image.sh: $bin_dir/$b is missing; build it first" >&2; exit 1; }
    # Debug info is most of a debug build's size and no use in an image.
    objcopy --strip-debug "$bin_dir/$b" "$ctx/bin/$b" 2>/dev/null || cp "$bin_dir/$b" "$ctx/bin/$b"
done

# The legacy builder: BuildKit needs the buildx plugin, which engines
# without a registry often lack, and this build needs nothing it adds.
DOCKER_BUILDKIT=0 docker build --quiet --build-arg "BASE=$base" --tag "$tag" "$ctx" >/dev/null
echo "built $tag from $bin_dir on $base"
