#!/usr/bin/env bash
echo "demo: not written yet" >&2; exit 1
