#!/usr/bin/env bash
# `make test`'s steps, one `make <step>` after another, each timed; the table of where the time went is
# printed at the end (and written to build/test-times.txt), whether the steps passed or not. Stops at
# the first step that fails, as make does, and exits with its status.
#
#   .ci/steps.sh STEP...        (MAKE, and the variables make passes down, come from the environment)
set -uo pipefail
cd "$(dirname "$0")/.."
times=build/test-times.txt
# Under `make -n test` (the docs' tests dry-run it) make still runs this script, its recipe naming
# $(MAKE): the steps are then dry runs too, and their zero times must not overwrite a real run's table.
flags=${MAKEFLAGS%% *}
if [[ $flags != -* && $flags == *n* ]]; then
    times=$(mktemp)
    trap 'rm -f "$times"' EXIT
fi
mkdir -p build
: > "$times"
start=$(date +%s)
status=0
for step in "$@"; do
    t0=$(date +%s)
    echo "==== make $step"
    ${MAKE:-make} --no-print-directory "$step"
    rc=$?
    dt=$(( $(date +%s) - t0 ))
    printf '%-16s %6d s  %s\n' "$step" "$dt" "$([ "$rc" = 0 ] && echo ok || echo "FAILED ($rc)")" >> "$times"
    if [ "$rc" != 0 ]; then status=$rc; break; fi
done
printf '%-16s %6d s\n' total $(( $(date +%s) - start )) >> "$times"
echo "==== make test: where the time went ($(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ //'))"
cat "$times"
exit "$status"
