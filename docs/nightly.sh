#!/usr/bin/env bash
# The nightly job of docs/nightly.md: play the suite on the newest checkpoint of a sweep, gate it against
# the last accepted run, write the page, keep the last $KEEP nights.
#
# Exit codes (what the scheduler sees):
#   0  no regression: tonight's run becomes the accepted run
#   1  regression: named in nightly/pages/NIGHT-gate.md and the page; the accepted run stays
#   2  the job cannot compare (no such sweep, settings or instances that differ): fix the job
#   3  a run or the page failed (a model that does not load, a full disk)
set -uo pipefail
APPLIANCE=${APPLIANCE:-.venv/bin/appliance}
MODELS=${MODELS:-models.toml}
SWEEP=${SWEEP:-smollm2-taboo-sweep}        # a models.toml entry with adapters = ".../checkpoint-*"
SUITE=${SUITE:---scenario clembench --seed 1}
WORK=${WORK:-nightly}
KEEP=${KEEP:-7}
night=$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$WORK/stores" "$WORK/pages" || exit 3
store="$WORK/stores/$night.duckdb"

# The sweep's newest checkpoint (highest step) and its base, as the catalog expands them tonight.
read -r newest base < <("$APPLIANCE" models list --models "$MODELS" --json | python3 -c '
import json, sys
try:
    rows = [row for row in json.load(sys.stdin) if row["sweep"] == sys.argv[1]]
except ValueError:  # models list said why on stderr
    rows = []
if rows:
    newest = max(rows, key=lambda row: row["step"])
    print(newest["name"], newest["base"])' "$SWEEP")
if [ -z "${newest:-}" ]; then
    echo "nightly: no checkpoint of sweep '$SWEEP' in $MODELS" >&2
    exit 2
fi

play() {  # play model $1 into tonight's store; prints the run id
    # shellcheck disable=SC2086  # SUITE is a list of options
    "$APPLIANCE" run $SUITE --players "$1" --models "$MODELS" --db "$store" --json |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["summary"]["run_id"])'
}

copy_store() {  # a store is its file and its journal folder
    rm -rf "$2" "$2.journal" && cp "$1" "$2" && cp -r "$1.journal" "$2.journal"
}

if [ -f "$WORK/accepted.duckdb" ]; then
    copy_store "$WORK/accepted.duckdb" "$store" || exit 3
    accepted=$(cat "$WORK/accepted-run")
else  # the first night: the base model is the first accepted run
    accepted=$(play "$base") || exit 3
fi
tonight=$(play "$newest") || exit 3

"$APPLIANCE" compare "$accepted" "$tonight" --db "$store" --markdown > "$WORK/pages/$night-gate.md"
status=$?
"$APPLIANCE" view "$accepted" "$tonight" --db "$store" --out "$WORK/pages/$night.html" > /dev/null || exit 3
if [ "$status" -eq 0 ]; then
    copy_store "$store" "$WORK/accepted.duckdb" && echo "$tonight" > "$WORK/accepted-run" || exit 3
fi

# Keep the last $KEEP nights: stores (with their journals) and pages; the accepted store is kept apart.
for old in $(ls -1 "$WORK/stores" | grep '\.duckdb$' | sort | head -n -"$KEEP"); do
    rm -rf "$WORK/stores/$old" "$WORK/stores/$old.journal" "$WORK/stores/$old.lock"
done
for old in $(ls -1 "$WORK/pages" | grep '\.html$' | sort | head -n -"$KEEP"); do
    rm -f "$WORK/pages/$old" "$WORK/pages/${old%.html}-gate.md"
done

echo "nightly $night: $newest (run $tonight) against run $accepted: exit $status; page $WORK/pages/$night.html"
exit "$status"
