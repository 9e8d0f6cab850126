# Machine L: the VAE plan, then the LLM target's plan, one after the other in the background.
set -u
mkdir -p /tmp/s /tmp/s2 && cp -a . /tmp/w && cd /tmp/w
( bash scripts/gpu_session.sh /tmp/s plans/session5/session5d.plan > /tmp/s/session.log 2>&1
  AUTO_OPTIM_GOALS=targets/llm-decode/goals.json bash scripts/gpu_session.sh /tmp/s2 targets/llm-decode/plans/h100.plan > /tmp/s2/session.log 2>&1
  touch /tmp/ALL_DONE ) > /dev/null 2>&1 &
