#!/bin/bash
# kab.sh compares two enginebench binaries kernel by kernel: in paired,
# interleaved rounds it profiles one model on the cpu backend with each
# (-profile), sums the wall time of the kernels whose profile line
# matches a regular expression, and prints per round the ratio B / A of
# that sum, the same ratio with each side divided by its other kernels'
# time in the same run (drift-corrected: a VM whose speed moves between
# runs moves both parts of a run alike), and the whole model's ratio;
# then the medians. BATCH (default 1) and T (default 1s) set the batch
# size and the time per profile.
#
#	tools/enginebench/kab.sh A B model [rounds] [regex]
#
# e.g. tools/enginebench/kab.sh /tmp/eb-a /tmp/eb-b bert 6 'Softmax|LayerNorm'
#      BATCH=8 tools/enginebench/kab.sh /tmp/eb-a /tmp/eb-b resnet50 6 ' gemm '
set -euo pipefail
if [ $# -lt 3 ]; then
	sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
fi
A=$1 B=$2 M=$3 R=${4:-6} RE=${5:-.}
for i in $(seq "$R"); do
	for side in A B; do
		bin=$A
		[ "$side" = B ] && bin=$B
		"$bin" -profile "$M" -batch "${BATCH:-1}" -time "${T:-1s}" 2>/dev/null |
			awk -v re="$RE" -v s="$side" '$1 ~ /^[0-9]+$/ && NF >= 8 {
				if ($0 ~ re) sel += $8; tot += $8 }
				END { printf "%s %.1f %.1f\n", s, sel, tot }'
	done
done | awk '
function median(a, n,   i, j, t) {
	for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
$1 == "A" { sa = $2; ta = $3; next }
{
	sb = $2; tb = $3
	if (sa <= 0 || sb <= 0 || ta <= sa || tb <= sb) { print "round " NR / 2 ": no kernel matched (or only those)"; next }
	n++; r[n] = sb / sa; q[n] = (sb / (tb - sb)) / (sa / (ta - sa)); w[n] = tb / ta
	printf "round %d: selected A %.0f us, B %.0f us, B/A %.3f, drift-corrected %.3f; model %.3f\n", n, sa, sb, r[n], q[n], w[n]
}
END {
	if (n) printf "median of %d: selected %.3f, drift-corrected %.3f, model %.3f\n", n, median(r, n), median(q, n), median(w, n)
}'
