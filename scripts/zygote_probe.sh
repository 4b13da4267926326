#!/usr/bin/env bash
# Diagnose warm workers on a GPU machine: run the validation GPU test with the zygote's stderr
# logged, dump the zygote's Python stack after DUMP_AFTER seconds, list its children.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_out}; mkdir -p "$out"
export KERNELMILL_ZYGOTE_LOG="$out/zygote.log"
timeout "${TEST_TIMEOUT:-240}" bash scripts/gpu_check.sh fast > "$out/probe_test.txt" 2>&1 &
sleep "${DUMP_AFTER:-150}"
for z in $(pgrep -f zygote_worker); do
  echo "== zygote $z: $(cat /proc/$z/wchan 2>/dev/null) state $(awk '{print $3}' /proc/$z/stat)"
  kill -USR1 "$z"
  ps -o pid,ppid,stat,etimes,pcpu,wchan:30,args --ppid "$z" | cut -c1-160
done > "$out/zygote_ps.txt" 2>&1
wait
