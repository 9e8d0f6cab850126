# poll the background session for up to $1 seconds; copy what it has made to $OUT
[ -d /tmp/s ] || { echo "no /tmp/s: the machine is a fresh one"; exit 3; }
end=$((SECONDS + $1))
while [ $SECONDS -lt $end ] && [ ! -f /tmp/s/DONE ]; do sleep 5; done
cp -r /tmp/s/. "$OUT/" 2>/dev/null
echo "--- probe.log"; tail -n 8 /tmp/s/probe.log 2>/dev/null
echo "--- session.log"; tail -n 40 /tmp/s/session.log 2>/dev/null
ls /tmp/s/recs 2>/dev/null
