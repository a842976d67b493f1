#!/usr/bin/env bash
# bench/run_all.sh - foxhunt-dqn (`fhd-host bench`) against the same update in PyTorch
# (bench/torch_reference.py), every preset, in one run, then a side-by-side table.
#
# On the GPU machine, from its copy of the repository with .device/ (tools/device_bundle.sh):
#   bench/run_all.sh            cuda: C0 B1 B1-sn B2 B3, ours + torch eager/graph/compile;
#                               then cpu: C0 B1, ours + torch eager
#   bench/run_all.sh --gpu-only --presets "A1 A2" --fill 100000 --tf32
#                               the pixel presets (Nature CNN, uint8 replay), fp32 and TF32
# Here, from a normal build:
#   BUILD=build-bench bench/run_all.sh --cpu-only
# Options:
#   --cpu-only | --gpu-only
#   --presets "C0 B1 ..."           GPU presets (default: the five MLPs; A1 A2 are the pixel
#                                   ones, whose 1M-transition replay needs ~29 GiB)
#   --cpu-presets "C0 B1"           CPU presets (default: C0 B1)
#   --modes "eager graph compile"   PyTorch modes on the GPU (default: all three)
#   --repeats N                     timed runs per measurement (default 7)
#   --fill N                        replay fill of both sides (default: their own, min(capacity,
#                                   max(16 B, 65536)))
#   --tf32                          on the GPU also: ours with matmul_precision tf32_forward and
#                                   tf32, torch with --tf32 (its matmuls and cuDNN convs)
#   --bf16                          on the GPU also: ours with matmul_precision bf16 (refused for
#                                   conv presets: an error row), torch with --bf16 (autocast)
#   --peak-tflops X                 GPU peak for ours' peak_fraction
#   --shapes N                      then the random-shape suite: bench/shapes.py --n N --seed 1
#                                   (on the GPU when it runs, else the CPU with --small) into
#                                   DIR/shapes; its extra options in SHAPES_ARGS
#   --out DIR                       results (default: $OUT when set, else /tmp/fhd-bench)
# Environment: BUILD (default .device/build when present, else build), PYTHON (a python3 that
# imports torch; default: python3, then /usr/bin/python3). With .device/lib present it is put
# first on LD_LIBRARY_PATH.
# Writes DIR/results.jsonl (one JSON object per measurement, tagged with "machine"),
# DIR/table.md, DIR/env.txt and DIR/run.log; prints the table last. A failed measurement
# becomes a row with its error, and the run goes on.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

cpu=1 gpu=1
presets="C0 B1 B1-sn B2 B3"
cpu_presets="C0 B1"
modes="eager graph compile"
repeats=7
peak=""
shapes=0
fill=""
tf32=0
bf16=0
out="${OUT:-${TMPDIR:-/tmp}/fhd-bench}"
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-only) gpu=0 ;;
    --gpu-only) cpu=0 ;;
    --presets) presets="$2"; shift ;;
    --cpu-presets) cpu_presets="$2"; shift ;;
    --modes) modes="$2"; shift ;;
    --repeats) repeats="$2"; shift ;;
    --peak-tflops) peak="$2"; shift ;;
    --fill) fill="$2"; shift ;;
    --tf32) tf32=1 ;;
    --bf16) bf16=1 ;;
    --shapes) shapes="$2"; shift ;;
    --out) out="$2"; shift ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ -z "${BUILD:-}" ]; then
  if [ -x .device/build/fhd-host ]; then BUILD=.device/build; else BUILD=build; fi
fi
if [ -d .device/lib ]; then
  export LD_LIBRARY_PATH="$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
HOST="$BUILD/fhd-host"
[ -x "$HOST" ] || { echo "error: $HOST not found; build first or set BUILD" >&2; exit 1; }
if [ -z "${PYTHON:-}" ]; then
  for p in python3 /usr/bin/python3; do
    if "$p" -c 'import torch' >/dev/null 2>&1; then PYTHON=$p; break; fi
  done
fi
[ -n "${PYTHON:-}" ] || { echo "error: no python3 that imports torch; set PYTHON" >&2; exit 1; }

mkdir -p "$out"
res="$out/results.jsonl"
log="$out/run.log"
: >"$res"
: >"$log"
cores=$(nproc)
peak_arg=()
[ -n "$peak" ] && peak_arg=(--peak-tflops "$peak")
fill_arg=()
[ -n "$fill" ] && fill_arg=(--fill "$fill")

note() { echo "== $*" | tee -a "$log" >&2; }

# record MACHINE PRESET IMPL BACKEND -- COMMAND...: run one measurement, append its JSON
# line(s) to results.jsonl tagged with "machine"; a failure appends a row with the error.
record() {
  local machine=$1 preset=$2 impl=$3 backend=$4
  shift 5
  local tmp why
  tmp=$(mktemp)
  note "$machine $preset $impl $backend: $* (load $(cut -d' ' -f1-3 /proc/loadavg))"
  if "$@" >"$tmp" 2>>"$log" && grep -q '^{' "$tmp"; then
    grep '^{' "$tmp" | sed "s/^{/{\"machine\": \"$machine\", /" >>"$res"
  else
    why=$(grep -v '^==' "$log" | tail -n 1 | tr -d '"\\' | cut -c1-300)
    printf '{"machine": "%s", "preset": "%s", "impl": "%s", "backend": "%s", "error": "%s"}\n' \
      "$machine" "$preset" "$impl" "$backend" "${why:-failed}" >>"$res"
  fi
  rm -f "$tmp"
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $cores cores"
  echo "load: $(cat /proc/loadavg)"
  echo "fhd-host: $HOST; OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-unset};" \
    "CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-unset}"
  echo "python: $PYTHON; torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>&1)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
  fi
  "$HOST" info 2>&1 | grep -E '^(version|  cpu|  cuda)'
} | tee "$out/env.txt" >&2

# fhd-host embeds bench/presets/*.json at build time and torch_reference.py reads the files:
# a build older than the files would compare different configs.
for f in bench/presets/*.json; do
  p=$(basename "$f" .json)
  if ! "$HOST" bench --preset "$p" --print-config |
    "$PYTHON" -c 'import json, sys; sys.exit(json.load(sys.stdin) != json.load(open(sys.argv[1])))' \
      "$f"; then
    echo "error: fhd-host's preset $p differs from $f (rebuild $BUILD)" >&2
    exit 1
  fi
done
note "presets: fhd-host and bench/presets/*.json agree"

# Floors: each machine's large float32 matmul rate, once.
if [ $cpu = 1 ]; then
  record cpu sgemm torch cpu -- "$PYTHON" bench/torch_reference.py --device cpu --sgemm --threads "$cores"
fi
if [ $gpu = 1 ]; then
  record gpu sgemm torch cuda -- "$PYTHON" bench/torch_reference.py --device cuda --sgemm
  for p in $presets; do
    record gpu "$p" foxhunt-dqn cuda -- "$HOST" bench --preset "$p" --backend cuda \
      --repeats "$repeats" --json "${peak_arg[@]}" "${fill_arg[@]}"
    for m in $modes; do
      record gpu "$p" pytorch "torch-$m" -- "$PYTHON" bench/torch_reference.py --device cuda \
        --preset "$p" --mode "$m" --repeats "$repeats" --json "${peak_arg[@]}" "${fill_arg[@]}"
    done
    if [ $bf16 = 1 ]; then
      record gpu "$p" foxhunt-dqn cuda-bf16 -- "$HOST" bench --preset "$p" --backend cuda \
        --set matmul_precision=bf16 --repeats "$repeats" --json "${peak_arg[@]}" "${fill_arg[@]}"
      for m in $modes; do
        record gpu "$p" pytorch "torch-$m-bf16" -- "$PYTHON" bench/torch_reference.py \
          --device cuda --preset "$p" --mode "$m" --bf16 --repeats "$repeats" --json \
          "${peak_arg[@]}" "${fill_arg[@]}"
      done
    fi
    [ $tf32 = 1 ] || continue
    for prec in tf32_forward tf32; do
      record gpu "$p" foxhunt-dqn "cuda-$prec" -- "$HOST" bench --preset "$p" --backend cuda \
        --set matmul_precision="$prec" --repeats "$repeats" --json "${peak_arg[@]}" "${fill_arg[@]}"
    done
    for m in $modes; do
      record gpu "$p" pytorch "torch-$m-tf32" -- "$PYTHON" bench/torch_reference.py --device cuda \
        --preset "$p" --mode "$m" --tf32 --repeats "$repeats" --json "${peak_arg[@]}" \
        "${fill_arg[@]}"
    done
  done
fi
if [ $cpu = 1 ]; then
  for p in $cpu_presets; do # ours and PyTorch back to back, in the same machine state
    record cpu "$p" foxhunt-dqn cpu -- "$HOST" bench --preset "$p" --backend cpu \
      --repeats "$repeats" --json "${fill_arg[@]}"
    # PyTorch at the machine's core count, and at 1 thread (its OpenMP pool can oversubscribe
    # the cores together with its BLAS's own threads); the table takes the faster.
    for t in $(printf '%s\n' "$cores" 1 | sort -u); do
      record cpu "$p" pytorch torch-eager -- "$PYTHON" bench/torch_reference.py --device cpu \
        --preset "$p" --mode eager --threads "$t" --repeats "$repeats" --json "${fill_arg[@]}"
    done
  done
fi
if [ "$shapes" -gt 0 ]; then
  if [ $gpu = 1 ]; then shape_args=(--backend cuda); else shape_args=(--backend cpu --small); fi
  note "random shapes: $shapes from seed 1 (${shape_args[*]} ${SHAPES_ARGS:-})"
  # shellcheck disable=SC2086 # SHAPES_ARGS is a list of options
  "$PYTHON" bench/shapes.py "${shape_args[@]}" --n "$shapes" --seed 1 --build "$BUILD" \
    --out "$out/shapes" --work "${TMPDIR:-/tmp}/fhd-shapes" ${SHAPES_ARGS:-} >/dev/null 2>>"$log" ||
    note "bench/shapes.py failed (see $log)"
fi
note "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PYTHON" - "$res" <<'PYEOF' | tee "$out/table.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sgemm = {r["machine"]: r["sgemm_gflops"] for r in rows
         if r.get("preset") == "sgemm" and "sgemm_gflops" in r}


def fmt(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


out = ["| preset | machine | ours us/update median (p10-p90) | torch eager | torch graph "
       "| torch compile | eager / ours | graph / ours | compile / ours | ours GEMM TFLOP/s "
       "| floor us | ours act 1 / 64 obs us | torch act 1 / 64 obs us "
       "| CPU time us/update: ours / torch 1 thr |",
       "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
errors = [f"{r['machine']} {r['preset']} {r['impl']} {r.get('mode', r.get('backend'))}: "
          f"{r['error']}" for r in rows if "error" in r]
for ours in [r for r in rows if r.get("impl") == "foxhunt-dqn"]:
    m, p = ours["machine"], ours["preset"]
    # precision: ours' matmul_precision; its PyTorch rows are those with TF32 on (--tf32) for
    # tf32_forward and tf32, with autocast (--bf16) for bf16, neither for fp32
    prec = (ours.get("config") or {}).get("matmul_precision") or (  # error rows: the backend
        ours.get("backend", "")[5:] if ours.get("backend", "").startswith("cuda-") else "fp32")
    trows = {}  # mode -> the fastest PyTorch row of that mode (CPU: over thread counts)
    for r in rows:
        if r.get("impl") != "pytorch" or r["preset"] != p or r["machine"] != m:
            continue
        tb = r.get("backend", "")
        kind = ("bf16" if r.get("bf16") or tb.endswith("-bf16")
                else "tf32" if r.get("tf32") or tb.endswith("-tf32") else "fp32")
        if kind != ("fp32" if prec == "fp32" else "bf16" if prec == "bf16" else "tf32"):
            continue
        mode = r.get("mode", tb.replace("torch-", "").replace("-tf32", "").replace("-bf16", ""))
        old = trows.get(mode)
        if (old is None or "error" in old
                or r.get("us_per_update_median", float("inf")) < old["us_per_update_median"]):
            trows[mode] = r
    ou = ours.get("us_per_update_median")

    def us(mode):
        return trows.get(mode, {}).get("us_per_update_median")

    def tcell(mode):
        r = trows.get(mode, {})
        if us(mode) is None:
            return "-"
        return f"{us(mode):.1f}" + (f" ({r['threads']} thr)" if m == "cpu" else "")

    def ratio(mode):
        return f"{us(mode) / ou:.2f}x" if us(mode) and ou else "-"

    rate, flops = sgemm.get(m), ours.get("gemm_flops_per_update")
    floor = flops / (rate * 1e9) * 1e6 if rate and flops and prec == "fp32" else None
    te = trows.get("eager", {})
    t1 = [r for r in rows if r.get("impl") == "pytorch" and r["preset"] == p
          and r["machine"] == m and r.get("threads") == 1 and "cpu_us_per_update_median" in r]
    cpu_cell = "-"
    if m == "cpu" and ours.get("cpu_us_per_update_median"):
        cpu_cell = f"{ours['cpu_us_per_update_median']:.1f} / " + (
            f"{t1[0]['cpu_us_per_update_median']:.1f}" if t1 else "-")
    cell = (f"{ou:.1f} ({ours['us_per_update_p10']:.1f}-{ours['us_per_update_p90']:.1f})"
            if ou else "error")
    label = p if prec == "fp32" else f"{p} {prec}"
    out.append(f"| {label} | {m} | {cell} | {tcell('eager')} | {tcell('graph')} "
               f"| {tcell('compile')} | {ratio('eager')} | {ratio('graph')} "
               f"| {ratio('compile')} | {fmt(ours.get('tflops'), 4)} | {fmt(floor)} "
               f"| {fmt(ours.get('act_us_1'), 2)} / {fmt(ours.get('act_us_64'), 2)} "
               f"| {fmt(te.get('act_us_1'), 2)} / {fmt(te.get('act_us_64'), 2)} | {cpu_cell} |")
print("\n".join(out))
print()
print("ratios: PyTorch time / ours (above 1: ours is faster); torch columns on the CPU: the "
      "faster of --threads <cores> and --threads 1. CPU time: the process's CPU time per update "
      "(all threads; meaningful as work per update when both run one thread, i.e. with "
      "OPENBLAS_NUM_THREADS=1). Rows named tf32_forward / tf32: ours at that matmul_precision "
      "against PyTorch with TF32 matmuls and convs (--tf32); rows named bf16: ours at "
      "matmul_precision bf16 against PyTorch under bf16 autocast (--bf16). GEMM FLOPs count a "
      "conv as its "
      "im2col GEMM. floor (fp32 rows): GEMM FLOPs per update / the machine's large float32 "
      "matmul rate through torch ("
      + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in sgemm.items()) + ").")
for e in errors:
    print("error:", e)
PYEOF
if [ -f "$out/shapes/table.md" ]; then
  echo
  cat "$out/shapes/table.md"
fi
