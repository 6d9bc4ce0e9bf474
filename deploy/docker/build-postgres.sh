#!/usr/bin/env bash
# Builds the PostgreSQL image (deploy/docker/postgres/) on the base from
# build-base.sh, for deployments with no registry to pull postgres from.
#
#   deploy/docker/build-postgres.sh       # tag swarm-postgres:15
#
# Env: SWARM_POSTGRES_IMAGE (tag), SWARM_BASE_IMAGE (base tag).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tag=${SWARM_POSTGRES_IMAGE:-swarm-postgres:15}
base=${SWARM_BASE_IMAGE:-swarm-base:bookworm}
SWARM_BASE_IMAGE=$base "$here/build-base.sh"
DOCKER_BUILDKIT=0 docker build --quiet --build-arg "BASE=$base" --tag "$tag" "$here/postgres" >/dev/null
echo "built $tag on $base"
