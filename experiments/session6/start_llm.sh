# The LLM target's H100 plan in the background (a private copy of the tree), then poll for up to $1 s.
set -u
if [ ! -d /tmp/s2 ]; then
  mkdir -p /tmp/s2 && cp -a . /tmp/w && cd /tmp/w
  ( AUTO_OPTIM_GOALS=targets/llm-decode/goals.json bash scripts/gpu_session.sh /tmp/s2 targets/llm-decode/experiments/h100.plan > /tmp/s2/session.log 2>&1
    touch /tmp/LLM_DONE ) > /dev/null 2>&1 &
  cd - > /dev/null
fi
end=$((SECONDS + $1))
while [ $SECONDS -lt $end ] && [ ! -f /tmp/LLM_DONE ]; do sleep 5; done
mkdir -p "$OUT/llm"; cp -r /tmp/s2/. "$OUT/llm/" 2>/dev/null
[ -f /tmp/LLM_DONE ] && echo "LLM plan done" || echo "LLM plan still running"
grep -v '^{' /tmp/s2/session.log | tail -n 60
