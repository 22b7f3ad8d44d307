#!/bin/bash
# Rewards a correct list, and only on a machine whose one interface is loopback (no network).
actual=$(ls /sys/class/net)
if [ "$actual" = "lo" ] && [ "$(cat /tmp/interfaces.txt 2>/dev/null)" = "$actual" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
