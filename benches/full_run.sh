#!/bin/sh
# One full side-by-side run, the one benches/RESULTS.md quotes: every peer scenario at 1
# and 2 processes, then awa-fast in-process and with 2 worker processes, all on the same
# server; the merged table and charts land in benches/latest/.
#
#   sh benches/full_run.sh postgresql://postgres@127.0.0.1:55432/postgres
#
# About 70 minutes with four peers on the 2-core machine. Keep the machine otherwise
# idle. With AWA_FAST_ONLY=1 the peer results already in benches/latest/ are
# kept and only awa-fast is measured again (about 10-20 minutes).
set -eu
url=${1:?usage: full_run.sh POSTGRES_SERVER_URL}
# awa-fast runs last: fail now, not after the peers' hour, if it cannot start.
awa-fast bench --help >/dev/null
out=benches/latest
export AWA_FAST_BENCH_CPU_ITERATIONS="${AWA_FAST_BENCH_CPU_ITERATIONS:-16000}"
if [ "${AWA_FAST_ONLY:-0}" = 1 ]; then
    rm -f "$out/awa-fast.jsonl"
else
    rm -rf "$out"
    mkdir -p "$out" benches/results
    marker=$(mktemp)
    for scenario in drain cpu io latency retry scheduled; do
        python -m benches peers --database-url "$url" --scenario "$scenario" \
            --processes 1,2 --runs 3
    done
    for file in $(find benches/results -name '*-peers-*.jsonl' -newer "$marker" | sort); do
        cp "$file" "$out/"
    done
    rm -f "$marker"
fi
includes=""
for file in "$out"/*-peers-*.jsonl; do
    includes="$includes --include $file"
done
awa-fast bench all --database-url "$url" --processes 0 --runs 3 --out "$out"
# shellcheck disable=SC2086
awa-fast bench all --database-url "$url" --processes 2 --runs 3 --out "$out" $includes
