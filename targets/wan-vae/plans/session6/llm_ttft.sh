# The llm-decode target on an H100: time to first token (ttft preset) and the decode rate (full
# preset) of the best keeper in optimize.py, each with fp32 and bf16 eager measured in the same run.
set -u
export AUTO_OPTIM_GOALS=targets/llm-decode/goals.json PYTHONUNBUFFERED=1
for p in full ttft; do python3 harness/prepare.py --preset $p --seeded 2>&1 | tail -n 2; done
python3 harness/bench.py --preset ttft --baseline > "$OUT/ttft.log" 2>&1; echo "ttft bench exit $?"
python3 harness/bench.py --baseline > "$OUT/full.log" 2>&1; echo "full bench exit $?"
grep -v '^{' "$OUT/ttft.log" | head -n 20; grep -v '^{' "$OUT/full.log" | head -n 20
