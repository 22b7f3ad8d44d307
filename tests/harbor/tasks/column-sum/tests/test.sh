#!/bin/bash
expected=$(awk -F, 'NR > 1 { total += $1 } END { print total }' /data/numbers.csv)
if [ "$(cat /app/sum.txt 2>/dev/null)" = "$expected" ]; then reward=1.0; else reward=0.0; fi
printf '{"reward": %s, "expected": %s}\n' "$reward" "$expected" > /logs/verifier/reward.json
