#!/usr/bin/env bash
# The measuring half of one experiment on a cloud GPU through SkyPilot; its record comes back to
# runs/sky/ here, for `auto-optim apply`. A cloud wave is several of these at
# once (one cluster each), applied in turn.
#
#   bash scripts/sky/launch.sh CANDIDATE DESC [CLUSTER]       # e.g. candidates/a.py "bf16 weights"
#
# Needs `pip install skypilot` and a cloud it can use (`sky check`). GPUS=H100:1 (the default) picks
# the accelerator; EXTRA="--no-profile" passes flags to run_experiment. The cluster stops itself 15
# idle minutes after the job even if this script dies, and is taken down when the record is back.
set -euo pipefail
cd "$(dirname "$0")/../.."
usage="usage: launch.sh CANDIDATE DESC [CLUSTER]"
cand=${1:?$usage}
desc=${2:?$usage}
[ -f "$cand" ] || { echo "launch.sh: no candidate file $cand (a path inside the checkout)" >&2; exit 2; }
# experiment.yaml mounts the key folder (harness/ledger/signing.py key_dir(), at its default place) on the cluster.
[ -s "$HOME/.config/auto-optim/record-key" ] || { echo "launch.sh: no record-signing key in ~/.config/auto-optim" \
  "(make it once: python3 -P -c 'from harness.ledger import signing; signing.sign({})')" >&2; exit 2; }
name=$(basename "$cand" .py | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | cut -c1-20)
cluster=${3:-ao-${name%-}-$$}   # lowercase letters, digits and dashes: what every cloud accepts
rec="runs/sky/$cluster.json"
mkdir -p runs/sky
trap 'sky down -y "$cluster" >/dev/null 2>&1 || true' EXIT
sky launch -y -c "$cluster" --gpus "${GPUS:-H100:1}" -i 15 --down \
  --env CANDIDATE="$cand" --env DESC="$desc" --env RECORD="$rec" --env EXTRA="${EXTRA:-}" \
  scripts/sky/experiment.yaml
rsync -az "$cluster:sky_workdir/$rec" "$rec"   # SkyPilot puts each cluster in ~/.ssh/config
echo "record: $rec"
echo "apply it here: auto-optim apply $rec"
