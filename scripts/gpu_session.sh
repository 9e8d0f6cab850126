#!/usr/bin/env bash
# The recorded GPU session, for a machine without .git: makes the full-preset assets, then runs
# each candidate in experiments/ (and the current optimize.py last) through
# `run_experiment.py --measure-only`, one record per experiment. Back in the git checkout,
# `python harness/run_experiment.py --apply REC.json` for each record, in order, does the
# bookkeeping (results.tsv, leaderboard.md, PROGRESS.md, commits, profiles).
#
#   bash scripts/gpu_session.sh OUTDIR [--reproduce]
#
# --reproduce: skip the climb; re-run only the current optimize.py (a fresh-machine re-run).
set -u
out=${1:?usage: gpu_session.sh OUTDIR [--reproduce]}
mode=${2:-}
mkdir -p "$out/recs"
export PYTHONUNBUFFERED=1
cp optimize.py "$out/shipped_optimize.py"
log() { echo "[$(date +%T)] $*"; }

# The best median among the records so far, as run_experiment's --best-median (decides whether a
# record gets a keeper's profile; the real keep/revert decision is made again by --apply).
best_median() {
  python3 - "$out/recs" <<'EOF'
import json, pathlib, sys
meds = [r["bench"]["median_s"] for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json"))
        for r in [json.loads(p.read_text())] if r.get("would_be") in ("baseline", "keep")]
print(f"--best-median {min(meds)}" if meds else "")
EOF
}

run_exp() {  # run_exp CANDIDATE RECORD_NAME DESC [extra run_experiment args]
  local src=$1 name=$2 desc=$3
  shift 3
  cp "$src" optimize.py
  log "experiment $name: $desc"
  # shellcheck disable=SC2046
  python3 harness/run_experiment.py --preset full --measure-only --record-out "$out/recs/$name.json" \
    $(best_median) --desc "$desc" "$@" 2>&1 | tail -n 25
}

log "assets"
python3 harness/make_latent.py --preset full --seeded
python3 harness/make_reference.py --preset full
if [ "$mode" = "--reproduce" ]; then
  run_exp "$out/shipped_optimize.py" r1 "re-run of the shipped optimize.py on a fresh machine" --bench-baseline
else
  run_exp experiments/fp32_eager.py e1 "baseline: fp32 eager (PyTorch defaults)"
  run_exp experiments/bf16_eager.py e2 "bf16 weights and input, eager"
  run_exp experiments/bf16_eager_sleep.py e3 "deliberately slower: bf16 eager + 0.5 s sleep (proves the revert path)"
  run_exp "$out/shipped_optimize.py" e4 "fast path: bf16 channels_last_3d, 3 latent frames a pass, fused Triton norm/residual/subpixel-upsample kernels, spatial padding in the conv" --bench-baseline
fi
cp "$out/shipped_optimize.py" optimize.py
log "GPU-only tests"
python3 -m pytest -q -x tests/test_verify.py -k "side_stream or stream" 2>&1 | tail -n 5
log "decode to mp4"
python3 -m harness.decode assets/input_full.pt --out /tmp/decode_full.mp4 --compare --force 2>&1 | tail -n 30
python3 - <<'EOF'
import av
with av.open("/tmp/decode_full.mp4") as c:
    s = c.streams.video[0]
    n = sum(1 for _ in c.decode(s))
    print(f"mp4 readback: {n} frames, {s.codec_context.width}x{s.codec_context.height}, codec {s.codec_context.name}")
EOF
cp /tmp/decode_full_strip.png "$out/" 2>/dev/null
ls -la /tmp/decode_full* 2>/dev/null
log "done"
touch "$out/DONE"
