# poll machine L's two plans for up to $1 seconds; copy what they have made to $OUT
[ -d /tmp/s ] || { echo "no /tmp/s: the machine is a fresh one"; exit 3; }
end=$((SECONDS + $1))
while [ $SECONDS -lt $end ] && [ ! -f /tmp/ALL_DONE ]; do sleep 5; done
mkdir -p "$OUT/vae" "$OUT/llm"; cp -r /tmp/s/. "$OUT/vae/" 2>/dev/null; cp -r /tmp/s2/. "$OUT/llm/" 2>/dev/null
echo "--- vae"; grep -v '^{' /tmp/s/session.log | grep -E '^\[|status|median_s|metric|reason' | tail -n 20
echo "--- llm"; grep -v '^{' /tmp/s2/session.log 2>/dev/null | tail -n 40
