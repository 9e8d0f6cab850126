#!/usr/bin/env bash
# A plan longer than one device call: the first call starts scripts/gpu_session.sh in the
# background, in a private copy of the tree (a later call's sync replaces the working tree) and
# its own process session; every call (that one included) then waits up to SECONDS for it to
# end and copies what it has made so far to $OUT/NAME.
#
#   [AUTO_OPTIM_GOALS=...] bash scripts/gpu_background.sh NAME PLAN SECONDS
#
# A machine released between calls comes back bare: the call that finds no /tmp/gpu-NAME starts
# the plan again from its first line, and says so.
set -u
name=${1:?usage: gpu_background.sh NAME PLAN SECONDS}
plan=${2:?usage: gpu_background.sh NAME PLAN SECONDS}
wait_s=${3:?usage: gpu_background.sh NAME PLAN SECONDS}
out=/tmp/gpu-$name
if [ ! -d "$out" ]; then
  echo "starting plan $plan (nothing of $name on this machine)"
  # The package first: on a bare machine harness is not importable until it is installed, and an empty
  # key_dir would make the key copy below one of the whole filesystem (session 31: /tmp filled up).
  # Both checks come before $out exists: a refusal leaves nothing a later call would take for a plan
  # under way.
  python3 -m pip install -q --no-deps --no-build-isolation -e . || { echo "gpu_background: pip install -e . failed" >&2; exit 2; }
  key_dir=$(python3 -P -c 'from harness.ledger import signing; print(signing.key_dir())')
  [ -n "$key_dir" ] && [ -d "$key_dir" ] || { echo "gpu_background: no key folder (${key_dir:-harness not importable})" >&2; exit 2; }
  mkdir -p "$out" && cp -a . "/tmp/tree-$name"
  # The signing key too gets a private copy: a later call's sync rewrites the key folder it was
  # given, and a record signed or checked while the file is missing would meet a new key (session
  # 11: two records signed across such a sync, one of them lost).
  mkdir -p "/tmp/key-$name" && cp -a "$key_dir/." "/tmp/key-$name/"
  (cd "/tmp/tree-$name" && AUTO_OPTIM_KEY_DIR="/tmp/key-$name" setsid nohup bash -c \
    "bash scripts/gpu_session.sh '$out' '$plan' > '$out/session.log' 2>&1; touch '$out/ENDED'" > /dev/null 2>&1 &)
fi
end=$((SECONDS + wait_s))
while [ $SECONDS -lt $end ] && [ ! -f "$out/ENDED" ]; do sleep 5; done
mkdir -p "$OUT/$name" && cp -r "$out/." "$OUT/$name/"
[ -f "$out/ENDED" ] && echo "plan $name ended" || echo "plan $name still running"
grep -v '^{' "$out/session.log" | tail -n 70
