#!/usr/bin/env bash
# Regenerates docs/img/<schedule>.svg (p = 4, m = 8, each schedule's default chunks, unit costs)
# with a built weft-schedule and prints the markdown table of docs/schedules.md's
# "Pictures and numbers". Builds nothing itself:
#   scripts/render-schedule-docs.sh build/release/examples/weft-schedule [OUTPUT_DIR]
set -euo pipefail
if (($# < 1)) || [[ ! -x "$1" ]]; then
    echo "usage: $0 PATH/TO/weft-schedule [OUTPUT_DIR (default: docs/img)]" >&2
    exit 2
fi
tool="$1"
out="${2:-$(dirname "$0")/../docs/img}"
mkdir -p "$out"

# The schedules and their default chunks, from weft's one list of them (weft-schedule --list).
mapfile -t listed < <("$tool" --list)
size=(--stages 4 --microbatches 8)
missing=()

# The value of one key of weft-schedule --simulate's one-line JSON object.
field() { sed -E "s/.*\"$2\":(\[[^]]*\]|\"[^\"]*\"|[^,}]*).*/\1/" <<<"$1"; }

echo "| schedule | chunks v | makespan | bubble rate | peak activations per rank (micro-batches) | picture |"
echo "|---|---|---|---|---|---|"
for entry in "${listed[@]}"; do
    read -r s chunks <<<"$entry"
    args=(--schedule "$s" "${size[@]}" --chunks "$chunks")
    if ! json="$("$tool" "${args[@]}" --simulate 2>&1)" || ! "$tool" "${args[@]}" --format svg >"$out/$s.svg.tmp" 2>/dev/null; then
        rm -f "$out/$s.svg.tmp"
        echo "render-schedule-docs: $s failed: $json" >&2
        missing+=("$s")
        continue
    fi
    mv "$out/$s.svg.tmp" "$out/$s.svg"
    bubble="$(awk -v b="$(field "$json" bubble_rate)" 'BEGIN { printf "%.1f%%", 100 * b }')"
    peak="$(field "$json" peak_activations | tr -d '[]' | sed 's/,/, /g')"
    echo "| \`$s\` | $chunks | $(field "$json" makespan) | $bubble | $peak | [svg](img/$s.svg) |"
done
if ((${#missing[@]} > 0)); then
    echo "render-schedule-docs: not rendered: ${missing[*]}" >&2
    exit 1
fi
