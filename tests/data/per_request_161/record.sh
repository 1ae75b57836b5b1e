#!/bin/sh
# Regenerate the Dynamo 1.6.1 per-request records of every case in cases.txt (tab: name, arguments).
# DYNAMO_161 is a command running Dynamo 1.6.1's replay API behind the 1.4.2 command line (the
# shared reference set's run_dynamo_161.py under a Python with ai-dynamo 1.6.1), e.g.
#   DYNAMO_161="python run_dynamo_161.py" sh record.sh
set -e
cd "$(dirname "$0")"
while IFS="$(printf '\t')" read -r name args; do
    eval "DYN_LOG=error $DYNAMO_161 $args --quiet --report-json /dev/null --report-jsonl $name.per_request.jsonl" > /dev/null
    gzip -n -f "$name.per_request.jsonl"
done < cases.txt
