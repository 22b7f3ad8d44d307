#!/bin/bash
# The container's memory limit (64 MiB) makes the answer "no".
if [ "$(cat /app/fits.txt 2>/dev/null)" = "no" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
