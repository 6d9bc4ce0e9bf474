#!/usr/bin/env bash
# A rolling upgrade with two real builds, while a swarm runs:
#
#   deploy/rolling-upgrade.sh [OLD_REV]    (default: HEAD~1; a command, not a test)
#
# 1. OLD_REV's controller and three OLD_REV sidecars start a 12-task swarm
#    (each task sleeps a second and writes its file; a chain and a fan).
# 2. Once a few tasks merged, the controller is killed and HEAD's starts on
#    the same store and address: it migrates the store forward under its
#    advisory lock, and the old sidecars reconnect to it (the protocol rule
#    in proto/src/compat.rs).
# 3. The sidecars are then replaced by HEAD's one at a time.
# 4. The swarm must complete with every task merged and the tree exact;
#    then OLD_REV's controller is started on the store once more: it must
#    refuse it if HEAD migrated it to a newer schema.
#
# OLD_REV is built once into target/upgrade-old (release; minutes the
# first time), HEAD into target/debug.
set -euo pipefail
cd "$(dirname "$0")/.."
old_rev=${1:-HEAD~1}
root=$PWD
old_src=$(mktemp -d /tmp/swarm-upgrade-src-XXXXXX)
work=$(mktemp -d /tmp/swarm-upgrade-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  git -C "$root" worktree remove --force "$old_src" >/dev/null 2>&1 || true
  rm -rf "$old_src"
}
trap cleanup EXIT

echo "== building $old_rev (old) and HEAD (new)"
git worktree add --detach -q "$old_src" "$old_rev"
(cd "$old_src" && CARGO_TARGET_DIR="$root/target/upgrade-old" \
  cargo build -q --release -p swarm-controller -p swarm-sidecar -p swarmctl)
cargo build -q -p swarm-controller -p swarm-sidecar -p swarmctl
old="$root/target/upgrade-old/release"
new="$root/target/debug"

repo="$work/repo"
git init -q -b main "$repo"
git -C "$repo" -c user.name=u -c user.email=u@example.com commit -q --allow-empty -m base
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
plan="$work/plan.toml"
{
  printf 'name = "up"\n[defaults]\nretries = 2\n'
  for i in $(seq 1 12); do
    dep=""
    if [ "$i" -gt 1 ] && [ "$i" -le 6 ]; then dep="deps = [\"t$((i - 1))\"]"; fi
    printf '[[tasks]]\nid = "t%d"\nfiles = ["f/%d.txt"]\n%s\n' "$i" "$i" "$dep"
    printf 'command = "sleep 1 && mkdir -p f && echo %d > f/%d.txt"\n' "$i" "$i"
  done
} >"$plan"

controller() { # BIN LOG
  "$1/swarm-controller" --listen "127.0.0.1:$port" --repo "$repo" --heartbeat-interval-ms 500 --lease-ttl-ms 3000 >"$2" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do
    grep -q "listening on" "$2" 2>/dev/null && return 0
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then return 1; fi
    sleep 0.1
  done
}
sidecar() { # BIN ID
  "$1/swarm-sidecar" --controller "$url" --worker-id "$2" --repo "$repo" >"$work/$2.$(basename "$(dirname "$1")").log" 2>&1 &
  echo $!
}
merged() {
  "$new/swarmctl" --controller "$url" get tasks --swarm up -o json 2>/dev/null |
    python3 -c 'import json,sys; print(sum(1 for t in json.load(sys.stdin) if t["state"] == "MERGED"))' 2>/dev/null || echo 0
}
wait_merged() { # N SECONDS
  for _ in $(seq 1 $((${2} * 2))); do
    [ "$(merged)" -ge "$1" ] && return 0
    sleep 0.5
  done
  echo "FAIL: fewer than $1 tasks merged after $2 s"; exit 1
}

echo "== old controller, old sidecars"
controller "$old" "$work/controller.old.log"
ctl=${pids[-1]}
declare -A side
for w in w1 w2 w3; do side[$w]=$(sidecar "$old" "$w"); pids+=("${side[$w]}"); done
"$old/swarmctl" --controller "$url" create "$plan" >/dev/null
wait_merged 3 60

echo "== controller replaced by HEAD's (kill -9), old sidecars keep working"
kill -9 "$ctl"; wait "$ctl" 2>/dev/null || true
controller "$new" "$work/controller.new.log" || { echo "FAIL: HEAD's controller did not start on the old store"; tail "$work/controller.new.log"; exit 1; }
wait_merged 6 60

echo "== sidecars replaced one at a time"
for w in w1 w2 w3; do
  kill -TERM "${side[$w]}"
  for _ in $(seq 1 50); do kill -0 "${side[$w]}" 2>/dev/null || break; sleep 0.1; done
  side[$w]=$(sidecar "$new" "$w"); pids+=("${side[$w]}")
  sleep 1
done
wait_merged 12 120

echo "== checks"
"$new/swarmctl" --controller "$url" get tasks --swarm up -o json | python3 -c '
import json, sys
tasks = json.load(sys.stdin)
bad = [t["id"] for t in tasks if t["state"] != "MERGED"]
assert not bad, f"not merged: {bad}"
print(f"  {len(tasks)} tasks MERGED")'
branch=swarm/up/integration
for i in $(seq 1 12); do
  got=$(git -C "$repo" show "$branch:f/$i.txt")
  [ "$got" = "$i" ] || { echo "FAIL: f/$i.txt is $got"; exit 1; }
  n=$(git -C "$repo" log --format=%B "$branch" | grep -c "Swarm-Attempt: up/t$i#" || true)
  [ "$n" -ge 1 ] || { echo "FAIL: t$i has no merge on $branch"; exit 1; }
done
echo "  the tree is exact"
kill -TERM "${pids[@]}" 2>/dev/null || true
sleep 1
"$old/swarm-controller" --listen "127.0.0.1:0" --repo "$repo" >"$work/controller.refuse.log" 2>&1 &
p=$!; pids+=($p)
for _ in $(seq 1 50); do grep -q "listening on" "$work/controller.refuse.log" && break; kill -0 $p 2>/dev/null || break; sleep 0.1; done
if kill -0 $p 2>/dev/null; then
  # Builds with the same store schema share it both ways.
  echo "  $old_rev's controller opens the store again (no schema change between the two builds)"
else
  echo "  $old_rev's controller refuses the migrated store: $(tail -n 1 "$work/controller.refuse.log")"
fi
echo "PASS (logs in $work)"
