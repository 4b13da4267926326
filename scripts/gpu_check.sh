#!/usr/bin/env bash
# GPU checks on a CUDA machine: the `gpu`-marked tests and the GPU benchmarks, each logged.
# Usage: bash scripts/gpu_check.sh [PART ...]   PART in: tests fast hostile fidelity audit seeds
# validate grade build synth wait slots processes ("fast": the GPU tests minus the two whole-suite ones)
#        fidelity (the measure module's GPU tests, then benchmarks/grade_fidelity.py)
#        hostile (tests/hostile on CUDA: the hostile suite and the policy presets)
#        audit (benchmarks/kernelbench_audit.py on $KERNELBENCH, or shared/benchmarks/kernelbench
#        beside or inside the checkout; AUDIT_ARGS, default "--limit 10", picks levels and size)
#        stages (scripts/grade_stages.py: each worker run's stages, STAGES_ONLY picks kernels,
#        STAGES_GROUP=N grades N copies as one group)
#        profile (scripts/grade_profile.py: the reference and candidate tasks under cProfile)
#        probe (scripts/probe_profile.py: a validation probe's stages and functions, in process;
#        PROBE_NAMES picks KernelBench problems by file-name substring)
#        profiler (scripts/profiler_cost.py: what the candidate's profiler session costs)
#        setup (benchmarks/worker_setup.py: a candidate worker's guard setup and result checks,
#        CPU per step in warm CUDA workers; SETUP_RUNS workers, default 9)
#        setupprobe (scripts/setup_probe.py: what comes before the guards, fresh CUDA processes)
#        spy (the window's problems primed, then one pass under py-spy, SPY its binary;
#        SPY_S, SPY_COPIES; summarized per submission, spy_summary.txt)
#        witness (scripts/witness_probe.py: how kernels are linked; seen/unseen device times)
#        held (scripts/held_probe.py: NVML's violation counters under a GEMM at the power cap)
#        memprobe (scripts/worker_memory_probe.py: a worker's device memory step by step, as
#        NVML reads its pid and as the allocator counts it; the host's shared huge pages)
#        lateprobe (scripts/late_load_probe.py: an unseen trial's load onto the device, by how
#        its late part is mapped: as today, shared and populated, page-locked read-only)
#        placement (scripts/placement_probe.py: a kernel's time at several places in memory)
#        pytest (the gpu-marked tests in PYTEST_ARGS, files; PYTEST_K a -k filter: "a or b",
#        never "a|b")
#        window (an A/B of the timing window: benchmarks/grade_throughput.py on the kernelbench
#        and triton sets' problems WINDOW_MATCH, references cached once, then passes of
#        WINDOW_S seconds and WINDOW_COPIES copies alternating the default window (N*) and
#        one with the settings WINDOW_B (B*: "NAME=VALUE ..." as --window takes them);
#        WINDOW_PASSES picks them, default "N1 B1 N2 B2"; a C* pass takes the settings WINDOW_C
#        (a third arm); WINDOW_GROUP=N grades in groups; read the arms with
#        scripts/window_ab.py window_verdicts.tgz;
#        a G* pass grades the default window in groups of WINDOW_G (default 8);
#        an H* pass grades WINDOW_B's settings in groups of WINDOW_G;
#        verdicts kept, window_verdicts.tgz)
#        wait (the workers' CUDA wait: the window's passes with KERNELMILL_CUDA_WAIT=auto (A,
#        the driver's spin) and block (B, the default); as envab otherwise)
#        envab (an A/B over environment settings: passes alternating AB_A and AB_B, each
#        "NAME=VALUE ...", AB_PASSES default "A1 B1 A2 B2", a C* pass takes AB_C (a third arm);
#        WINDOW_MATCH, WINDOW_S, WINDOW_COPIES
#        as for window; AB_GROUP=N grades in groups, AB_WORKERS=N slots; verdicts kept)
#        slots (grades in flight per GPU: the window's problems WINDOW_MATCH graded with
#        --workers N for each N of SLOTS_PASSES, default "16 24 32 16 24 32", SLOTS_COPIES
#        copies (default 8), SLOTS_S seconds a pass (default 150), references cached once;
#        SUBSET_SETS picks the sets, default "triton kernelbench"; each CUDA process's peak
#        device memory per pass; verdicts kept, slots_verdicts.tgz)
#        processes (the slots' A/B over grading processes: the window's problems graded with
#        16 slots shared among N processes for each N of PROCESSES_PASSES, default "1 2 1 2";
#        SLOTS_COPIES, SLOTS_S as for slots; verdicts kept per pass)
#        serve (benchmarks/serve_throughput.py on CUDA: the service against the batch grader,
#        then per-sample requests alone and joined; SERVE_ARGS, default "--skip-load
#        --per-sample 16"; needs starlette, uvicorn and prometheus-client wheels in .whl)
#        context (scripts/context_probe.py: CUDA worker processes started N at once)
#        host (scripts/host_probe.py: graph timing on an idle and on a busy host)
#        exit (scripts/exit_probe.py: a CUDA worker's exit CPU and wall by what it held)
#        capture (scripts/capture_probe.py: work shared between a timing graph's calls;
#        CAPTURE_CASES: hostile cases graded alone on CUDA)
#        shadow (the hostile suite on CUDA, each verdict also judged by SHADOW_OLD's judge)
#        mined (a sample of mined problems validated at their sizes: MINED, MINED_N, MINED_LIMIT)
#        tf32 (the audit of convolution, CNN and RNN problems with the library's fp32 defaults,
#        then with the workers' IEEE fp32: TF32_ARGS)
#        ray (benchmarks/ray_scaling.py: validation through Ray on 1 GPU and on all of them, and
#        a run that kills a host; RAY_SYNTH synthesized problems, RAY_KILL_AFTER, RAY_KILL_LIMIT,
#        RAY_CORES_PER_GPU pins each run to that many cores per GPU; RAY_PROBLEMS a problems
#        file instead of seeds + RAY_SYNTH; RAY_RUNS picks runs (one all kill); RAY_PAIR=1 the
#        one-GPU run once per GPU at once; RAY_DEADLINE stops each run after that many seconds)
#        (the parts that grade or validate for long log the GPU's busy %, the host's CPUs and its
#        available memory each second: util_PART.csv, cpu_PART.csv, hostmem_PART.csv)
#        (grade honors GRADE_ARGS, GRADE_PROFILE=1: the parent under cProfile, and
#        GRADE_PYSPY=PATH: every process under that py-spy binary)
#        (hostile honors KERNELMILL_HOSTILE_CASES, KERNELMILL_HOSTILE_GROUP=N: groups of N,
#        KERNELMILL_HOSTILE_WORKERS=N: N grades at once, and
#        HOSTILE_K: a pytest -k filter)
# (default: all). Logs and JSON results go to $OUT (or ./gpu_out); more than 8 files there go into
# one archive, gpu_out.tgz (a device call returns 8 files). A run cut short (``timeout``) never
# reaches that step: end the device command with one of its own, e.g.
#   timeout 540 bash scripts/gpu_check.sh ...; mkdir -p /tmp/o; mv $OUT/* /tmp/o/; tar czf $OUT/all.tgz -C /tmp/o .
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -d .whl ] && ! python3 -c "import libcst, datasets, jsonlines, datasketch" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
ray_site=$(ls .ray/ray-site.tgz .whl/ray-site.tgz 2>/dev/null | head -1)
if [ -n "$ray_site" ] && ! python3 -c "import ray" 2>/dev/null; then
  # Ray's wheel is over a device call's carry limit: a trimmed copy of its files (no Java jars,
  # no dashboard web build) travels as .ray/ray-site.tgz (carry .ray only where Ray is needed)
  mkdir -p /tmp/site && tar xzf "$ray_site" -C /tmp/site
  case ":${PYTHONPATH:-}:" in *:/tmp/site:*) ;; *) export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} ;; esac
fi
if ! python3 -c "import kernelmill.core" 2>/dev/null; then
  # Import the checkout without installing it: kernelmill.<folder> maps to ./<folder>.
  mkdir -p /tmp/kmroot/kernelmill
  for d in core curate synth validate grade splits app data; do ln -sfn "$PWD/$d" "/tmp/kmroot/kernelmill/$d"; done
  export PYTHONPATH=/tmp/kmroot${PYTHONPATH:+:$PYTHONPATH}
fi
kernelmill() { python3 -m kernelmill.app.cli "$@"; }
# GPU busy % and memory used, sampled every second while a long part runs (util_PART.csv), and
# their means in timings.txt
sampler=""
# (of the GPU CUDA_VISIBLE_DEVICES names when it names one: nvidia-smi ignores that variable)
sample_gpu() {
  local only=()
  [[ "${CUDA_VISIBLE_DEVICES:-}" =~ ^[0-9]+$ ]] && only=(-i "$CUDA_VISIBLE_DEVICES")
  nvidia-smi "${only[@]}" --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits \
    -lms 1000 > "$out/util_$1.csv" 2>/dev/null & sampler=$!
}
stop_sampling() {
  [ -n "$sampler" ] || return 0
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null; sampler=""
  awk -F', *' -v part="$1" '{u+=$1; m+=$2; n++} END {if (n) printf "== %s: GPU busy %.0f%%'\
' on average, %.1f GiB used on average (%d samples)\n", part, u/n, m/n/1024, n}' \
    "$out/util_$1.csv" | tee -a "$out/timings.txt"
}
# each CUDA process's device memory (NVML's per-process reading, once a second) while a part
# runs: its peak per process, summarized into timings.txt
apps_sampler=""
sample_apps() {
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 1000 \
    > "$out/apps_$1.csv" 2>/dev/null & apps_sampler=$!
}
stop_apps() {
  [ -n "$apps_sampler" ] || return 0
  kill "$apps_sampler" 2>/dev/null; wait "$apps_sampler" 2>/dev/null; apps_sampler=""
  awk -F', *' '$2 ~ /^[0-9]+$/ {if ($2 > m[$1]) m[$1] = $2} END {for (p in m) print m[p]}' \
    "$out/apps_$1.csv" | sort -n | awk -v part="$1" '{v[NR]=$1} END {if (NR) printf "== %s: '\
'CUDA processes %d, peak MiB each: median %d, 90th percentile %d, max %d\n", part, NR, \
    v[int((NR+1)/2)], v[(int(NR*0.9) > 0 ? int(NR*0.9) : 1)], v[NR]}' | tee -a "$out/timings.txt"
}
# the host's CPUs busy (all cores together, from /proc/stat) while a part runs, into timings.txt
cpu_sampler=""
sample_cpu() {
  ( read -r _ u n s i w q sq st _ < /proc/stat; busy0=$((u+n+s+q+sq+st)); all0=$((busy0+i+w))
    while sleep 1; do read -r _ u n s i w q sq st _ < /proc/stat; busy=$((u+n+s+q+sq+st))
      all=$((busy+i+w)); echo "$(( (busy-busy0)*100/(all-all0 > 0 ? all-all0 : 1) ))"
      busy0=$busy; all0=$all; done ) > "$out/cpu_$1.csv" 2>/dev/null & cpu_sampler=$!
}
stop_cpu_sampling() {
  [ -n "$cpu_sampler" ] || return 0
  kill "$cpu_sampler" 2>/dev/null; wait "$cpu_sampler" 2>/dev/null; cpu_sampler=""
  sort -n "$out/cpu_$1.csv" | awk -v part="$1" -v cores="$(nproc)" '{v[NR]=$1; s+=$1}
    END {if (NR) printf "== %s: host CPUs busy %.0f%% on average, %d%% at the 90th percentile '\
'(%d cores, %d samples)\n", part, s/NR, v[(int(NR*0.9)+1 > NR) ? NR : int(NR*0.9)+1], cores, NR}' \
    | tee -a "$out/timings.txt"
}
# the host's available memory (MemAvailable, GiB, once a second) while a part runs: its low
# point into timings.txt (whether the host's memory, not the GPU's, is what a part ran short of)
mem_sampler=""
sample_host_memory() {
  ( while :; do awk '/^MemAvailable:/ {printf "%.1f\n", $2/1048576}' /proc/meminfo; sleep 1
    done ) > "$out/hostmem_$1.csv" 2>/dev/null & mem_sampler=$!
}
stop_host_memory() {
  [ -n "$mem_sampler" ] || return 0
  kill "$mem_sampler" 2>/dev/null; wait "$mem_sampler" 2>/dev/null; mem_sampler=""
  sort -n "$out/hostmem_$1.csv" | awk -v part="$1" '{v[NR]=$1} END {if (NR) printf "== %s: '\
'host memory available, GiB: lowest %.1f, median %.1f (%d samples)\n", part, v[1], \
    v[int((NR+1)/2)], NR}' | tee -a "$out/timings.txt"
}
# One pass of benchmarks/grade_throughput.py over the window's problems (WINDOW_MATCH of the
# kernelbench and triton sets; references cached in /tmp/window_refs, shared by the window,
# wait and slots parts): subset_pass PART NAME SHOWN [grade_throughput flags...] logs to
# $out/PART_NAME.log and prints its lines matching the regex SHOWN
subset_pass() {
  local part=$1 name=$2 shown=$3 kb="" c cache=/tmp/window_refs
  shift 3
  for c in "${KERNELBENCH:-}" .kb/kernelbench shared/benchmarks/kernelbench ../shared/benchmarks/kernelbench; do
    [ -n "$c" ] && [ -d "$c/level1" ] && { kb=$c; break; }; done
  mkdir -p "$cache"
  # shellcheck disable=SC2086 — SUBSET_PREFIX is a command's words (py-spy's, for the spy
  # part), SUBSET_SETS a list of sets
  ${SUBSET_PREFIX:-} python3 benchmarks/grade_throughput.py --sets ${SUBSET_SETS:-triton kernelbench} ${kb:+--kernelbench "$kb"} \
    --cache-dir "$cache" --phases refs-cached \
    --match "${WINDOW_MATCH:-level1_(1|8|40|88|95)_|level2_(12|67)_|level3_3_|matmul_fp16_(2k|4k)|scale_add_1m}" \
    "$@" --json "$out/${part}_$name.json" > "$out/${part}_$name.log" 2>&1
  grep -E "$shown" "$out/${part}_$name.log" | cut -c1-300
}
# a part's kept verdict folders as one archive ($out/PART_verdicts.tgz: the device returns 8 files)
keep_verdicts() {
  (cd "$out" && ls -d "$1"_verdicts_* >/dev/null 2>&1 && tar czf "$1_verdicts.tgz" "$1"_verdicts_* \
    && rm -rf "$1"_verdicts_*)
  # each problem's admission ask beside what its workers held (NVML, their allocators)
  [ -f "$out/$1_verdicts.tgz" ] && python3 scripts/memory_fit.py "$out/$1_verdicts.tgz" \
    > "$out/$1_memory.log" 2>&1
  return 0
}
parts=${*:-tests seeds validate grade build}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" \
  | tee -a "$out/device.txt"
for part in $parts; do
  start=$(date +%s)
  case $part in audit|build|validate|ray|grade|envab|wait|window|slots|processes)
    sample_gpu "$part"; sample_cpu "$part"; sample_host_memory "$part" ;; esac
  case $part in
    tests)    python3 -m pytest -m gpu -q -p no:cacheprovider -o addopts="" tests 2>&1 \
                | tee "$out/gpu_tests.log" ;;
    fast)     python3 -m pytest -m gpu -v -rA -p no:cacheprovider -o addopts="" \
                -k "${GPU_K:-not hostile_suite and not all_seeds_pass}" tests/validate/test_measure.py \
                tests/validate/test_memory.py tests/grade/test_grade_gpu.py \
                tests/hostile/test_hostile_gpu.py tests/validate/test_validate_gpu.py 2>&1 \
                | tee "$out/gpu_fast.log" ;;
    seeds)    python3 benchmarks/seed_runtime.py --json "$out/seed_runtime.json" 2>&1 \
                | tee "$out/seed_runtime.log" ;;
    validate) python3 benchmarks/validate_throughput.py --out "$out" 2>&1 \
                | tee "$out/validate_throughput.log" ;;
    # shellcheck disable=SC2086 — GRADE_ARGS is a list of flags (e.g. "--sets triton")
    # GRADE_PROFILE=1: the parent under cProfile (grade_profile.txt: the 40 costliest calls)
    # GRADE_PYSPY=PATH: the run under that py-spy binary, every process sampled on CPU
    # (grade_pyspy.txt: collapsed stacks; idle threads left out)
    grade)    ${GRADE_PYSPY:+$GRADE_PYSPY record --subprocesses --nonblocking -r 25 -f raw \
                -o "$out/grade_pyspy.txt" --} \
                python3 ${GRADE_PROFILE:+-m cProfile -o /tmp/grade.prof} benchmarks/grade_throughput.py \
                ${GRADE_ARGS:-} --json "$out/grade.json" 2>&1 | tee "$out/grade_throughput.log"
              [ -f /tmp/grade.prof ] && python3 -c "import pstats, sys; pstats.Stats(sys.argv[1], \
                stream=open(sys.argv[2], 'w')).sort_stats('tottime').print_stats(40)" \
                /tmp/grade.prof "$out/grade_profile.txt" ;;
    synth)    python3 benchmarks/synth_throughput.py 2>&1 | tee "$out/synth_throughput.log" ;;
    # shellcheck disable=SC2086 — STAGES_ONLY is a list of kernel names
    # STAGES_GROUP=N grades N copies of each as one group (one window)
    stages)   python3 scripts/grade_stages.py --only ${STAGES_ONLY:-scale_add_4k matmul_fp16_2k} \
                ${STAGES_GROUP:+--group $STAGES_GROUP} 2>&1 | tee "$out/grade_stages.log" ;;
    # shellcheck disable=SC2086 — PROFILE_ONLY is a list of kernel names
    profile)  python3 scripts/grade_profile.py ${PROFILE_ONLY:+--only $PROFILE_ONLY} 2>&1 \
                | tee "$out/grade_profile.log" ;;
    profiler) python3 scripts/profiler_cost.py 2>&1 | tee "$out/profiler_cost.log" ;;
    # what comes before a candidate's guards, in fresh CUDA processes (scripts/setup_probe.py)
    setupprobe) python3 scripts/setup_probe.py --runs 3 --mb 64 256 2>&1 | tee "$out/setup_probe.log" ;;
    # the window's problems primed, then one primed pass (SPY_S seconds, SPY_COPIES copies)
    # under py-spy (SPY: its binary, default py-spy; every process, 25 Hz), summarized by
    # scripts/pyspy_summary.py per submission graded (spy_summary.txt); SPY_ARGS: more flags
    # for the spied pass (e.g. "--group 8": GRPO-style groups)
    # shellcheck disable=SC2086 — SPY_ARGS is a list of flags
    spy)      subset_pass spy prime "per minute" --copies 1 --deadline "${WINDOW_PRIME_S:-140}"
              SUBSET_PREFIX="${SPY:-py-spy} record --subprocesses --nonblocking -r 25 -f raw -o /tmp/spy_raw.txt --" \
                subset_pass spy spied "per minute|CPU seconds per" --primed \
                --copies "${SPY_COPIES:-4}" --deadline "${SPY_S:-100}" ${SPY_ARGS:-}
              n=$(python3 -c "import json, sys; d = json.load(open(sys.argv[1])); \
print(sum(v.get('submissions', 0) for v in d.values() if isinstance(v, dict)) or 1)" "$out/spy_spied.json" 2>/dev/null || echo 1)
              python3 scripts/pyspy_summary.py /tmp/spy_raw.txt --rate 25 --subs "$n" --top 30 \
                > "$out/spy_summary.txt" 2>&1; head -60 "$out/spy_summary.txt"
              gzip -c /tmp/spy_raw.txt > "$out/spy_raw.txt.gz" ;;
    # a candidate worker's guard setup and result checks, CPU per step, in warm CUDA workers
    setup)    python3 benchmarks/worker_setup.py --device cuda --runs "${SETUP_RUNS:-9}" 2>&1 \
                | tee "$out/worker_setup.log" ;;
    witness)  python3 scripts/witness_probe.py 2>&1 | tee "$out/witness_probe.log" ;;
    # NVML's violation counters under a GEMM at the power cap and a light kernel (settle_if)
    held)     python3 scripts/held_probe.py 2>&1 | tee "$out/held_probe.log" ;;
    # an unseen trial's load onto the device, by how its late part is mapped
    lateprobe) python3 scripts/late_load_probe.py 2>&1 | tee "$out/late_load_probe.log" ;;
    memprobe) python3 scripts/worker_memory_probe.py --json "$out/worker_memory.json" 2>&1 \
                | tee "$out/worker_memory.log" ;;
    # shellcheck disable=SC2086 — RAY_RUNS is a list of run names
    ray)      python3 benchmarks/ray_scaling.py --out /tmp/ray_out --n-synth "${RAY_SYNTH:-60}" \
                ${RAY_PROBLEMS:+--problems $RAY_PROBLEMS} ${RAY_RUNS:+--runs $RAY_RUNS} \
                ${RAY_PAIR:+--pair} ${RAY_DEADLINE:+--deadline $RAY_DEADLINE} \
                --kill-after "${RAY_KILL_AFTER:-8}" ${RAY_KILL_LIMIT:+--kill-limit $RAY_KILL_LIMIT} \
                ${RAY_CORES_PER_GPU:+--cores-per-gpu $RAY_CORES_PER_GPU} \
                2>&1 | tee "$out/ray_scaling.log"
              # every run's result with its verdicts, for `ray_scaling.py --table` here
              tar czf "$out/ray_results.tgz" -C /tmp/ray_out $(cd /tmp/ray_out && ls ./*.json) ;;
    # shellcheck disable=SC2086 — PYTEST_ARGS is a list of pytest arguments
    # (the validator's GPU tests keep their records under $out/records)
    window)   shown="NOT CERTIFIED|per minute|window's parts|turn's parts|spread|CPU seconds (per|by stage)|waited for shared|longest stretch|spare trials|scored over the one-call|captured again in the window"
              subset_pass window prime "$shown" --copies 1 --deadline "${WINDOW_PRIME_S:-140}"
              for pass in ${WINDOW_PASSES:-N1 B1 N2 B2}; do
                settings=()
                group=${WINDOW_GROUP:-}
                case $pass in B*) for s in ${WINDOW_B:-round_ms=40}; do
                  settings+=(--window "$s"); done ;;
                  C*) for s in ${WINDOW_C:-}; do settings+=(--window "$s"); done ;;
                  G*) group=${WINDOW_G:-8} ;;
                  H*) group=${WINDOW_G:-8}; for s in ${WINDOW_B:-round_ms=40}; do
                  settings+=(--window "$s"); done ;; esac
                subset_pass window "$pass" "$shown" --primed --copies "${WINDOW_COPIES:-3}" \
                  --deadline "${WINDOW_S:-85}" ${group:+--group $group} \
                  --keep-verdicts "$out/window_verdicts_$pass" "${settings[@]}"
              done
              keep_verdicts window ;;
    # envab: an A/B over environment settings: passes alternate AB_A and AB_B (each "NAME=VALUE
    # ..."), AB_PASSES default "A1 B1 A2 B2"; wait is the A/B of the workers' CUDA wait
    wait|envab) shown="per minute|CPU seconds per|spread|in flight|windows over|ends over|shared hold, median|waited for shared|stepped aside:|NOT CERT"
              if [ "$part" = wait ]; then a="KERNELMILL_CUDA_WAIT=auto" b="KERNELMILL_CUDA_WAIT=block"
              else a=${AB_A:-} b=${AB_B:-}; fi
              subset_pass "$part" prime "$shown" --copies 1 --deadline "${WINDOW_PRIME_S:-140}"
              for pass in ${AB_PASSES:-${WAIT_PASSES:-A1 B1 A2 B2}}; do
                case $pass in A*|W*) settings=$a ;; C*) settings=${AB_C:-} ;; *) settings=$b ;; esac
                # shellcheck disable=SC2086 — the settings are words NAME=VALUE
                (for kv in $settings; do export "${kv?}"; done
                 subset_pass "$part" "$pass" "$shown" --primed --copies "${WINDOW_COPIES:-3}" \
                   --deadline "${WINDOW_S:-85}" ${AB_GROUP:+--group $AB_GROUP} \
                   ${AB_WORKERS:+--workers $AB_WORKERS} --keep-verdicts "$out/${part}_verdicts_$pass")
              done
              keep_verdicts "$part" ;;
    slots)    shown="per minute|CPU seconds per|in flight|slots could not|spread|admission wait|device memory|NOT CERT"
              subset_pass slots prime "$shown" --copies 1 --deadline "${WINDOW_PRIME_S:-140}"
              pass=0
              for n in ${SLOTS_PASSES:-16 24 32 16 24 32}; do
                pass=$((pass + 1))
                sample_apps "slots_${pass}_$n"
                subset_pass slots "${pass}_$n" "$shown" --primed --workers "$n" \
                  --copies "${SLOTS_COPIES:-8}" --deadline "${SLOTS_S:-150}" \
                  --keep-verdicts "$out/slots_verdicts_${pass}_$n"
                stop_apps "slots_${pass}_$n"
              done
              keep_verdicts slots ;;
    # PROCESSES_PASSES: grading processes per pass (default "1 2 1 2"), 16 slots each
    processes) shown="per minute|CPU seconds per|in flight|spread"
              subset_pass processes prime "$shown" --copies 1 --deadline "${WINDOW_PRIME_S:-140}"
              pass=0
              for n in ${PROCESSES_PASSES:-1 2 1 2}; do
                pass=$((pass + 1))
                subset_pass processes "${pass}_$n" "$shown" --primed --workers 16 --processes "$n" \
                  --copies "${SLOTS_COPIES:-8}" --deadline "${SLOTS_S:-150}" \
                  --keep-verdicts "$out/processes_verdicts_${pass}_$n"
              done
              keep_verdicts processes ;;
    pytest)   KERNELMILL_TEST_OUT="$out/records" python3 -m pytest -m gpu -q -p no:cacheprovider -o addopts="" ${PYTEST_ARGS:-tests} \
                ${PYTEST_K:+-k "$PYTEST_K"} 2>&1 \
                | tee "$out/pytest_gpu.log" ;;
    # SERVE_ARGS: benchmarks/serve_throughput.py's flags (the service against the batch grader)
    # shellcheck disable=SC2086 — SERVE_ARGS is a list of flags
    serve)    python3 benchmarks/serve_throughput.py --device cuda ${SERVE_ARGS:---skip-load --per-sample 16} \
                2>&1 | tee "$out/serve_throughput.log" ;;
    # how fast the host starts CUDA worker processes: N forked at once, each one's context
    context)  python3 scripts/context_probe.py --json "$out/context_probe.json" 2>&1 \
                | tee "$out/context_probe.log" ;;
    host)     python3 scripts/host_probe.py 2>&1 | tee "$out/host_probe.log" ;;
    # what a CUDA worker's exit costs, by what it held (EXIT_REPEATS children per case)
    exit)     python3 scripts/exit_probe.py --repeats "${EXIT_REPEATS:-3}" \
                --json "$out/exit_probe.json" 2>&1 | tee "$out/exit_probe.log" ;;
    # the timing graph and forwards that share work between its calls; CAPTURE_CASES: hostile
    # cases graded alone on CUDA beside it (their verdicts say why a graph was not used)
    capture)  python3 scripts/capture_probe.py 2>&1 | tee "$out/capture_probe.log"
              for c in ${CAPTURE_CASES:-}; do
                ref=$(sed -n 's/^# problem: //p' "tests/hostile/$c.py")
                ref_file=$(ls tests/hostile/"$ref".py tests/fixtures/*/"$ref".py 2>/dev/null | head -1)
                kernelmill grade --reference "$ref_file" --candidate "tests/hostile/$c.py" \
                  --device cuda --json > "$out/grade_$c.json" 2> "$out/grade_$c.log" &
              done; wait ;;
    # shellcheck disable=SC2086 — PLACEMENT_ONLY is a list of kernel names
    placement) python3 scripts/placement_probe.py ${PLACEMENT_ONLY:+--only $PLACEMENT_ONLY} 2>&1 \
                | tee "$out/placement_probe.log" ;;
    # HOSTILE_K picks tests by name (pytest -k), e.g. "presets" for the policy presets alone;
    # KERNELMILL_HOSTILE_TIMING='{"single_warm": true}' grades with those timing settings
    hostile)  python3 -m pytest -m gpu -q -s -p no:cacheprovider -o addopts="" \
                ${HOSTILE_K:+-k "$HOSTILE_K"} tests/hostile/test_hostile_gpu.py 2>&1 \
                | tee "$out/hostile.log" ;;
    fidelity) python3 -m pytest -m gpu -q -p no:cacheprovider -o addopts="" \
                tests/validate/test_measure.py 2>&1 | tee "$out/measure_gpu_tests.log"
              python3 benchmarks/grade_fidelity.py --repeats "${FIDELITY_REPEATS:-3}" \
                --json "$out/fidelity.json" 2>&1 | tee "$out/fidelity.log" ;;
    # BUILD_OUT: the build folder (a rerun resumes it); BUILD_LIMIT=S stops it after S seconds
    build)    bo=${BUILD_OUT:-/tmp/kmbuild}
              timeout -s TERM "${BUILD_LIMIT:-0}" python3 -m kernelmill.app.cli build --out "$bo" \
                --device cuda 2>&1 | tee -a "$out/build.log"
              for f in report.html build_state.json validated.jsonl; do
                cp "$bo/$f" "$out/" 2>/dev/null; done
              ls -la "$bo" > "$out/build_files.txt" 2>&1 ;;
    audit)    kb=""
              for c in "${KERNELBENCH:-}" .kb .kb/kernelbench shared/benchmarks/kernelbench ../shared/benchmarks/kernelbench; do
                if [ -n "$c" ] && [ -d "$c/level1" ]; then kb=$c; break; fi; done
              if [ -z "$kb" ]; then echo "audit: no KernelBench checkout (set KERNELBENCH)" \
                | tee "$out/audit.log"
              else
                # AUDIT_RESUME: an earlier call's audit.jsonl, whose problems are not run again
                [ -n "${AUDIT_RESUME:-}" ] && cp "$AUDIT_RESUME" "$out/audit.jsonl"
                # shellcheck disable=SC2086 — AUDIT_ARGS is a list of flags
                # AUDIT_LIMIT: seconds before the audit stops and prints its tables over what it did
                timeout "${AUDIT_LIMIT:-0}" python3 benchmarks/kernelbench_audit.py "$kb" --device cuda ${AUDIT_ARGS:---limit 10} \
                  --out "$out/audit.jsonl" --json "$out/audit.json" 2>&1 | tee "$out/audit.log"
              fi ;;
    # the hostile suite on CUDA with every judge() made a second time by another judge's file
    # (SHADOW_OLD, default .kb/old_judge.py); differences land in shadow/ (KERNELMILL_HOSTILE_CASES)
    shadow)   timeout "${SHADOW_LIMIT:-0}" python3 scripts/judge_shadow.py --old "${SHADOW_OLD:-.kb/old_judge.py}" \
                --out "$out/shadow" -- -m gpu -q -s -p no:cacheprovider -o addopts="" \
                tests/hostile/test_hostile_gpu.py::test_hostile_suite_on_cuda 2>&1 | tee "$out/shadow.log" ;;
    # a random sample of mined problems (MINED: files, MINED_N, MINED_LIMIT s) through the
    # validator at their chosen sizes; the summary also of a run cut short by its limit
    mined)    # shellcheck disable=SC2086 — MINED is a list of files
              timeout "${MINED_LIMIT:-0}" python3 benchmarks/mine_gpu_sample.py ${MINED:-.kb/mined/*.jsonl} \
                --n "${MINED_N:-200}" --device cuda --out "$out/mined_validated.jsonl" 2>&1 | tee "$out/mined.log"
              python3 benchmarks/mine_gpu_sample.py --summarize --out "$out/mined_validated.jsonl" \
                ${MINED:-.kb/mined/*.jsonl} 2>&1 | tee -a "$out/mined.log" ;;
    tf32)     # the audit of TF32-sensitive problems (convolutions, CNNs, RNNs) twice: with the
              # library's fp32 defaults (KERNELMILL_FP32=library: cuDNN TF32 on) and as workers
              # run by default (IEEE fp32); TF32_ARGS picks levels, size and the name filter
              kb=""
              for c in "${KERNELBENCH:-}" .kb .kb/kernelbench shared/benchmarks/kernelbench ../shared/benchmarks/kernelbench; do
                if [ -n "$c" ] && [ -d "$c/level1" ]; then kb=$c; break; fi; done
              # shellcheck disable=SC2086 — TF32_ARGS is a list of flags
              for mode in ${TF32_MODES:-library ieee}; do
                KERNELMILL_FP32=$mode timeout "${TF32_LIMIT:-0}" python3 benchmarks/kernelbench_audit.py "$kb" --device cuda \
                  ${TF32_ARGS:---limit 12 --match '(?i)conv|resnet|mobilenet|efficientnet|vgg|densenet|lstm|gru|squeezenet|regnet|googlenet'} \
                  --out "$out/tf32_$mode.jsonl" --json "$out/tf32_$mode.json" 2>&1 | tee "$out/tf32_$mode.log"
              done ;;
    probe)    # PROBE_NAMES: KernelBench problems (file-name substrings) whose probe is profiled
              python3 scripts/probe_profile.py ${KERNELBENCH:+--kernelbench "$KERNELBENCH"} \
                ${PROBE_NAMES:-20_LeakyReLU} 2>&1 | tee "$out/probe_profile.log" ;;
    *)        echo "unknown part $part" ;;
  esac
  stop_sampling "$part"
  stop_cpu_sampling "$part"
  stop_host_memory "$part"
  echo "== $part took $(( $(date +%s) - start ))s" | tee -a "$out/timings.txt"
done
# A device call returns at most 8 files of $OUT: where the parts left more, every file goes into
# one archive ($out/gpu_out.tgz) with timings.txt and device.txt beside it
if [ "$(find "$out" -type f | wc -l)" -gt 8 ]; then
  (cd "$out" && find . -type f ! -name gpu_out.tgz -print0 | tar czf /tmp/gpu_out.tgz --null -T - \
    && find . -mindepth 1 ! -name timings.txt ! -name device.txt -delete \
    && mv /tmp/gpu_out.tgz . && ls)
fi
