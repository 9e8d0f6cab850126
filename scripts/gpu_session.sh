#!/usr/bin/env bash
# A recorded GPU session, for a machine without .git: makes the full-preset assets (input,
# reference, pool of fresh inputs), then runs each
# line of a plan through `run_experiment.py --measure-only` (one JSON record per line) and applies
# the record to this copy's results.tsv at once, so the next line is judged against it. Back in
# the git checkout, `auto-optim apply REC.json` for each record, in order,
# does the same bookkeeping for real (results.tsv, leaderboard.md, PROGRESS.md, commits,
# profiles, quality strips).
#
#   bash scripts/gpu_session.sh OUTDIR PLAN [--mp4]
#
# PLAN: one experiment a line, `candidate file | extra run_experiment args | description`, the file
# relative to the target's folder (AUTO_OPTIM_GOALS's, else the repository);
# blank lines and lines starting with '#' are skipped (targets/*/plans/*.plan). A line starting with
# `$ ` is a command run as it stands, from the repository (another preset's assets, a bench).
# --mp4: afterwards, with the best keeper back in optimize.py, run the GPU-only test and decode
# the benchmark latent to an mp4 (targets/wan-vae/model/to_mp4.py --compare), reading the mp4 back.
# PRESET=tiny runs the same steps at the tiny preset (a dry run of a plan on a CPU machine). It applies
# each record where it runs, as on the GPU's copy: in a git checkout a baseline or a keep is committed
# there, so dry-run in a clone of your own (git clone . /tmp/dry && cd /tmp/dry), never in the checkout.
#
# A `$ ` command finds the plan's candidates, as they were when it started, under
# $PLAN_CANDIDATES (a bench of one of them after a later line's keep rewrote optimize.py), and
# writes what should come back with the records under $PLAN_OUT (OUTDIR).
# A plan longer than one device call: scripts/gpu_background.sh starts and polls it.
#
# The signing key. Every record is signed with the person's key (harness/ledger/signing.py), and --apply
# in the checkout records only what that key signed. Give this machine a copy of the key folder and
# point AUTO_OPTIM_KEY_DIR at it (or put it at ~/.config/auto-optim here), e.g.
#   scp -r ~/.config/auto-optim gpu:auto-optim-key && ssh gpu 'cd repo && AUTO_OPTIM_KEY_DIR=~/auto-optim-key bash scripts/gpu_session.sh OUT PLAN'
# and delete the copy when the session is over. Without a key there the script refuses: a key made
# on the GPU machine would sign records the checkout refuses.
set -u
# The package, installed from this copy (its own code, never the project root on sys.path: harness/__init__.py);
# every python3 below runs with -P, so the working folder (this copy's root) is not on sys.path either.
python3 -m pip install -q --no-deps --no-build-isolation -e . || { echo "gpu_session: pip install -e . failed" >&2; exit 2; }
preset=${PRESET:-full}
out=${1:?usage: gpu_session.sh OUTDIR PLAN [--mp4]}
plan=${2:?usage: gpu_session.sh OUTDIR PLAN [--mp4]}
mp4=${3:-}
mkdir -p "$out/recs"
export PLAN_OUT="$out"
# plan paths are relative to the target's folder: AUTO_OPTIM_GOALS's, else pyproject.toml's target
root=$(python3 -P -c 'from harness import paths; print(paths.goals_path().parent)')
export PYTHONUNBUFFERED=1
log() { echo "[$(date +%T)] $*"; }

key=$(python3 -P -c 'from harness.ledger import signing; print(signing.key_path())')
[ -s "$key" ] || { echo "gpu_session: no record-signing key at $key: copy your key folder to this machine and set" \
  "AUTO_OPTIM_KEY_DIR to it (on the machine you apply on: python3 -P -c 'from harness.ledger import signing; signing.sign({})')" >&2; exit 2; }
log "records signed with the key in $(dirname "$key")"

log "assets"
python3 -P -m harness.cli.prepare --preset "$preset" --seeded 2>&1 | tail -n 3

# Every candidate as it is now: applying a keeper below rewrites the target's optimize.py, so a
# later line naming optimize.py would otherwise measure that keeper instead of the file planned.
snap="$out/candidates"
mkdir -p "$snap"
export PLAN_CANDIDATES="$snap"
grep -v '^ *\(#\|\$ \|$\)' "$plan" | cut -d'|' -f1 | sed 's/^ *//; s/ *$//' | sort -u | while read -r cand; do
  mkdir -p "$snap/$(dirname "$cand")" && cp "$root/$cand" "$snap/$cand"
done

n=$(ls "$out/recs" | wc -l)  # a second plan into the same OUTDIR numbers on, never over
while IFS= read -r line; do
  case "$line" in
    '$ '*) log "command: ${line#\$ }"; bash -c "${line#\$ }" < /dev/null 2>&1 | tail -n 25; continue ;;
  esac
  IFS='|' read -r cand extra desc <<< "$line"
  cand=$(echo "$cand" | sed 's/^ *//; s/ *$//')
  case "$cand" in ''|'#'*) continue ;; esac
  n=$((n + 1))
  rec="$out/recs/$(printf '%02d' "$n").json"
  desc=$(echo "$desc" | sed 's/^ *//; s/ *$//')
  log "experiment $n: $cand: $desc"
  # shellcheck disable=SC2086
  python3 -P -m harness.cli.run_experiment --preset "$preset" --measure-only --record-out "$rec" --desc "$desc" \
    --candidate "$snap/$cand" $extra 2>&1 | tail -n 25
  [ -f "$rec" ] && python3 -P -m harness.cli.run_experiment --apply "$rec" 2>&1 | tail -n 5
done < "$plan"

if [ "$mp4" = "--mp4" ]; then
  log "GPU-only tests"
  python3 scripts/gpu_check.py 2>&1 | tail -n 8
  log "decode to mp4"
  python3 "$root/model/to_mp4.py" "$root/assets/input_$preset.pt" --out /tmp/decode_full.mp4 --compare --force 2>&1 | tail -n 30
  python3 - <<'PY'
import av
with av.open("/tmp/decode_full.mp4") as c:
    s = c.streams.video[0]
    n = sum(1 for _ in c.decode(s))
    print(f"mp4 readback: {n} frames, {s.codec_context.width}x{s.codec_context.height}, codec {s.codec_context.name}")
PY
  cp /tmp/decode_full_strip.png "$out/" 2>/dev/null
  ls -la /tmp/decode_full* 2>/dev/null
fi
tail -n 12 "$root/results.tsv" > "$out/results_tail.tsv"  # the target's own
log "done"
touch "$out/DONE"
