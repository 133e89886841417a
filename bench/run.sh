#!/usr/bin/env bash
# Wall time of `egress-sandbox run -- true` against a bare `docker run --rm --network none
# IMAGE true`, side by side with hyperfine; prints the ratio of the medians.
#
#   bench/run.sh [IMAGE]          IMAGE defaults to the base image (egress-sandbox-base:bookworm-4)
#   RUNS=20 BIN=path/to/egress-sandbox bench/run.sh
#
# Builds the release binary unless BIN is given. Images are prepared once before timing
# (the proxy image is made on the first run), so only the steady state is measured.
set -euo pipefail

cd "$(dirname "$0")/.."
IMAGE=${1:-egress-sandbox-base:bookworm-4}
RUNS=${RUNS:-15}
if [[ -z "${BIN:-}" ]]; then
    cargo build --release --quiet
    BIN=target/$(rustc --print host-tuple)/release/egress-sandbox
fi
command -v hyperfine >/dev/null || { echo "hyperfine is not installed (apt-get install -y hyperfine)" >&2; exit 1; }

image_flag=(--image "$IMAGE")
if [[ "$IMAGE" == egress-sandbox-base:* ]]; then
    image_flag=()
fi
# Warm-up outside the measurement: builds the proxy (and, if needed, base) image.
"$BIN" run "${image_flag[@]}" -- true >/dev/null 2>&1

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
hyperfine --warmup 2 --runs "$RUNS" --export-json "$out/times.json" \
    --command-name "docker run --rm --network none" "docker run --rm --network none $IMAGE true" \
    --command-name "egress-sandbox run" "$BIN run ${image_flag[*]} -- true"

python3 - "$out/times.json" <<'PY'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
docker = results["docker run --rm --network none"]["median"]
ours = results["egress-sandbox run"]["median"]
print(f"median: docker run {docker:.3f}s, egress-sandbox run {ours:.3f}s, ratio {ours / docker:.2f}x (target <= 2.5x)")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
