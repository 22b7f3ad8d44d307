#!/bin/bash
# Fails (set -e) before writing any reward when the page is missing.
set -e
grep -q hello /srv/site/index.html
echo 1 > /logs/verifier/reward.txt
