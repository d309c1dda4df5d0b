#!/usr/bin/env bash
# The timeline page in a real browser (issue 27): 50 contexts on three engines, drawn with
# `gpusched timeline`, loaded by headless Chromium at 1600 px; a script added to a copy of the
# page reads its own DOM once loaded and reports what a person would see: the contexts' labels
# and colours all distinct, every run box coloured as its context's legend entry, no two legend
# texts overlapping, and no horizontal scrollbar.
#
# Usage: test_timeline.sh GPUSCHEDD GPUSCHED
set -euo pipefail

gpuschedd=$1 gpusched=$2
# shellcheck source=tests/shell/lib.sh
. "$(dirname "$0")/lib.sh"
sock="ipc://$dir/s.sock"
contexts=50

g() { "$gpusched" --url "$sock" --timeout 20000 "$@"; }

start_daemon daemon "$sock" "$dir/audit.db"
daemon_pid=$started_pid

# Each submit makes its own device and context: 50 contexts, spread over nodes 0..2.
for i in $(seq "$contexts"); do
	g submit --node $((i % 3)) --spin-us 300 --wait >/dev/null || fail "submit $i"
done
g timeline -o "$dir/t.html" --json >"$dir/t.json" || fail "timeline"
jq -e --argjson n "$contexts" '.contexts == $n and .packets == $n and .truncated == false' \
	"$dir/t.json" >/dev/null || fail "timeline: $(cat "$dir/t.json")"

# The page with a probe: what it finds goes into a <pre id="verdict"> that --dump-dom prints.
cat >"$dir/probe.js" <<'JS'
window.addEventListener('load', () => {
  const q = (s) => [...document.querySelectorAll(s)];
  const labels = q('g.legend rect.ctx').map((r) => r.dataset.label);
  const fill = {};
  q('g.legend rect.ctx').forEach((r) => { fill[r.dataset.label] = r.getAttribute('fill'); });
  const colours = Object.values(fill);
  let mismatched = 0, unlabelled = 0;
  q('rect.run').forEach((r) => {
    const l = r.dataset.label;
    if (l === 'paging') return;
    if (!(l in fill)) unlabelled++;
    else if (fill[l] !== r.getAttribute('fill')) mismatched++;
  });
  const boxes = q('g.legend text').map((t) => t.getBoundingClientRect());
  let overlaps = 0, empty = 0;
  boxes.forEach((a, i) => {
    if (a.width === 0) empty++;
    boxes.slice(i + 1).forEach((b) => {
      if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) overlaps++;
    });
  });
  const maxLabel = Math.max(...labels.map((l) => l.length));
  const v = document.createElement('pre');
  v.id = 'verdict';
  v.textContent = `verdict contexts=${labels.length} labels=${new Set(labels).size}` +
    ` colours=${new Set(colours).size} mismatched=${mismatched} unlabelled=${unlabelled}` +
    ` overlaps=${overlaps} empty=${empty} longest_label=${maxLabel}` +
    ` scroll_width=${document.documentElement.scrollWidth} inner_width=${window.innerWidth}`;
  document.body.appendChild(v);
});
JS
{
	sed 's|</body></html>||' "$dir/t.html"
	printf '<script>\n'
	cat "$dir/probe.js"
	printf '</script></body></html>\n'
} >"$dir/probe.html"

timeout 60 chromium --headless --no-sandbox --disable-gpu --window-size=1600,1000 \
	--virtual-time-budget=5000 --dump-dom "file://$dir/probe.html" >"$dir/dom.html" \
	2>"$dir/chromium.log" || fail "chromium: $(tail -5 "$dir/chromium.log")"
verdict=$(grep -o 'id="verdict">verdict [^<]*' "$dir/dom.html") || fail "the probe reported nothing"
verdict=${verdict#*>}
echo "$verdict"
val() { sed -E "s/.* $1=([0-9]+).*/\1/" <<<"$verdict"; }
[ "$(val contexts)" = "$contexts" ] || fail "legend has $(val contexts) contexts"
[ "$(val labels)" = "$contexts" ] || fail "labels not distinct: $verdict"
[ "$(val colours)" = "$contexts" ] || fail "colours not distinct: $verdict"
[ "$(val mismatched)" = 0 ] && [ "$(val unlabelled)" = 0 ] || fail "runs vs legend: $verdict"
[ "$(val overlaps)" = 0 ] && [ "$(val empty)" = 0 ] || fail "legend texts overprint: $verdict"
[ "$(val longest_label)" -le 4 ] || fail "labels are not short: $verdict"
[ "$(val scroll_width)" -le "$(val inner_width)" ] || fail "a horizontal scrollbar: $verdict"
echo "test_timeline: $contexts contexts with distinct labels and colours, a legend without overlaps, no horizontal scrollbar at 1600 px"
