# The llm-decode session-6 plan in the background (a private copy of the tree), then poll for up to $1 s.
set -u
if [ ! -d /tmp/s4 ]; then
  mkdir -p /tmp/s4 && cp -a . /tmp/w4 && cd /tmp/w4
  ( AUTO_OPTIM_GOALS=targets/llm-decode/goals.json bash scripts/gpu_session.sh /tmp/s4 targets/llm-decode/experiments/h100_session6.plan > /tmp/s4/session.log 2>&1
    touch /tmp/LLM3_DONE ) > /dev/null 2>&1 &
  cd - > /dev/null
fi
end=$((SECONDS + $1))
while [ $SECONDS -lt $end ] && [ ! -f /tmp/LLM3_DONE ]; do sleep 5; done
mkdir -p "$OUT/llm"; cp -r /tmp/s4/. "$OUT/llm/" 2>/dev/null
[ -f /tmp/LLM3_DONE ] && echo "plan done" || echo "plan still running"
grep -v '^{' /tmp/s4/session.log | tail -n 70
