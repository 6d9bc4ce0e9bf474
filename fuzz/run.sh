#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60) with libFuzzer and
# AddressSanitizer, from the corpus it kept last time and the kept inputs
# in fuzz/regressions/. A crash or hang lands in
# fuzz/libfuzzer/artifacts/<target>/: fix it, then copy the input to
# fuzz/regressions/<target>/, which the ordinary test
# suite replays (fuzz/targets/tests/replay.rs).
#
#   fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz=fuzz/libfuzzer
secs=${1:-60}
shift || true
# cargo fuzz passes -Z flags (sanitizers); this is the machine's stable toolchain.
export RUSTC_BOOTSTRAP=1
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then mapfile -t targets < <(cargo fuzz list --fuzz-dir "$fuzz"); fi
mkdir -p "$fuzz/logs"
for t in "${targets[@]}"; do
  mkdir -p "$fuzz/corpus/$t" "fuzz/regressions/$t"
  echo "== $t ($secs s)"
  cargo fuzz run --fuzz-dir "$fuzz" -O "$t" "$fuzz/corpus/$t" "fuzz/regressions/$t" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    > "$fuzz/logs/$t.log" 2>&1 || { echo "$t: FAILED, see $fuzz/logs/$t.log and $fuzz/artifacts/$t/"; tail -n 30 "$fuzz/logs/$t.log"; exit 1; }
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$fuzz/logs/$t.log" | sed "s/^/  /"
done
