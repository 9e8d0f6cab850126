# The llm-decode session-6 plan in the background (a private copy of the tree), then poll for up to $1 s.
set -u
if [ ! -d /tmp/s3 ]; then
  mkdir -p /tmp/s3 && cp -a . /tmp/w3 && cd /tmp/w3
  ( AUTO_OPTIM_GOALS=targets/llm-decode/goals.json bash scripts/gpu_session.sh /tmp/s3 targets/llm-decode/experiments/h100_session6.plan > /tmp/s3/session.log 2>&1
    touch /tmp/LLM2_DONE ) > /dev/null 2>&1 &
  cd - > /dev/null
fi
end=$((SECONDS + $1))
while [ $SECONDS -lt $end ] && [ ! -f /tmp/LLM2_DONE ]; do sleep 5; done
mkdir -p "$OUT/llm"; cp -r /tmp/s3/. "$OUT/llm/" 2>/dev/null
[ -f /tmp/LLM2_DONE ] && echo "plan done" || echo "plan still running"
grep -v '^{' /tmp/s3/session.log | tail -n 70
