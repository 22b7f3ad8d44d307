#!/bin/bash
ls /sys/class/net > /tmp/interfaces.txt
