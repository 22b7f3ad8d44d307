#!/bin/bash
if head -c 200M /dev/zero | tail > /dev/null; then echo yes > /app/fits.txt; else echo no > /app/fits.txt; fi
