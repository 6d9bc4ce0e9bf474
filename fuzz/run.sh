#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60) with libFuzzer and
# AddressSanitizer, from the corpus it kept last time and the kept inputs
# in regressions/. A crash or hang lands in artifacts/<target>/: fix it,
# then copy the input to regressions/<target>/, which the ordinary test
# suite replays (fuzz/targets/tests/replay.rs).
#
#   fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-60}
shift || true
# cargo fuzz passes -Z flags (sanitizers); this is the machine's stable toolchain.
export RUSTC_BOOTSTRAP=1
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then mapfile -t targets < <(cargo fuzz list); fi
mkdir -p logs
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t" "regressions/$t"
  echo "== $t ($secs s)"
  cargo fuzz run "$t" "corpus/$t" "regressions/$t" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    > "logs/$t.log" 2>&1 || { echo "$t: FAILED, see fuzz/logs/$t.log and fuzz/artifacts/$t/"; tail -n 30 "logs/$t.log"; exit 1; }
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "logs/$t.log" | sed "s/^/  /"
done
