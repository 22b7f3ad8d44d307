#!/bin/bash
awk -F, 'NR > 1 { total += $1 } END { print total }' /data/numbers.csv > /app/sum.txt
