#!/usr/bin/env bash
# The demo behind `make demo`: runs lpemu on the bundled data and writes a Markdown report.
set -euo pipefail
LPEMU=${1:?usage: demo.sh PATH/TO/lpemu}
OUT=${LPEMU_DEMO_OUT:-out/demo}
mkdir -p "$OUT"
REPORT="$OUT/report.md"
{
  echo "# lpemu demo report"
  echo
  echo "Generated $(date -u +%Y-%m-%dT%H:%M:%SZ) by \`make demo\`."
  echo
  echo "## Element formats"
  echo
  echo '```'
  "$LPEMU" formats list
  echo '```'
  for f in fp8_e4m3 fp8_e5m2 fp6_e2m3 fp4_e2m1 e8m0; do
    echo
    echo "### $f"
    echo
    echo '```'
    "$LPEMU" formats show "$f"
    echo '```'
  done
  echo
  echo "## Rounding 1000 and 0.3 into fp8_e4m3 under each mode and overflow policy"
  echo
  echo "| rounding | overflow | 1000 | 0.3 |"
  echo "|---|---|---|---|"
  for r in nearest_even nearest_away toward_zero toward_positive toward_negative; do
    for o in native saturate; do
      a=$("$LPEMU" encode fp8_e4m3 1000 --rounding "$r" --overflow "$o")
      b=$("$LPEMU" encode fp8_e4m3 0.3 --rounding "$r" --overflow "$o")
      echo "| $r | $o | \`$a\` | \`$b\` |"
    done
  done
} > "$REPORT"
echo "lpemu demo: report written to $(cd "$OUT" && pwd)/report.md"
