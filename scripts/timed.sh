#!/usr/bin/env bash
# `timed.sh LABEL CMD...`: runs CMD and prints its wall time, so a CI log splits by phase.
label=$1
shift
start=$EPOCHREALTIME
status=0
"$@" || status=$?
end=$EPOCHREALTIME
awk -v label="$label" -v s="$start" -v e="$end" -v rc="$status" \
  'BEGIN { printf "[time] %s: %.1f s%s\n", label, e - s, rc ? " (failed, exit " rc ")" : "" }'
exit $status
