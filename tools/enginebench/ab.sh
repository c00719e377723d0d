#!/bin/bash
# ab.sh compares two enginebench binaries (say, built before and after a
# change) on the cpu backend in paired, interleaved rounds, so that a
# machine whose speed drifts between minutes (a shared VM) moves both
# sides of each pair alike. For each model and batch size it prints both
# medians and the median of the per-round ratios B / A with their range.
#
#	tools/enginebench/ab.sh A B [rounds] [models] [batches] [time]
#
# e.g. git stash; go build -o /tmp/eb-a ./tools/enginebench; git stash pop
#      go build -o /tmp/eb-b ./tools/enginebench
#      tools/enginebench/ab.sh /tmp/eb-a /tmp/eb-b 8 resnet50,resnet18,mobilenetv2 1
set -euo pipefail
if [ $# -lt 2 ]; then
	sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
fi
A=$1 B=$2 R=${3:-8} M=${4:-resnet18,mobilenetv2,resnet50} BS=${5:-1} T=${6:-1s}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for i in $(seq "$R"); do
	for side in A B; do
		bin=$A
		[ "$side" = B ] && bin=$B
		"$bin" -models "$M" -batches "$BS" -time "$T" -rounds 1 -preempt-trials 0 -ort=false 2>&1 |
			awk -F'|' -v s="$side" -v i="$i" '$3 ~ /^ cpu $/ && $4 ~ /^ [0-9]+ $/ {
				gsub(/ /, "", $2); gsub(/ /, "", $4); gsub(/ /, "", $5)
				print i, s, $2 "/" $4, $5 }' >>"$out"
	done
done
awk '
function median(a, n,   i, j, t) {
	for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ v[$3, $1, $2] = $4; keys[$3] = 1; rounds[$1] = 1 }
END {
	for (k in keys) {
		n = 0
		for (i in rounds)
			if ((k, i, "A") in v && (k, i, "B") in v) {
				n++; a[n] = v[k, i, "A"]; b[n] = v[k, i, "B"]; r[n] = b[n] / a[n]
			}
		if (n == 0) continue
		lo = r[1]; hi = r[1]
		for (i = 1; i <= n; i++) { if (r[i] < lo) lo = r[i]; if (r[i] > hi) hi = r[i] }
		printf "%s: A median %.2f ms, B median %.2f ms, B/A paired median %.3f (range %.3f-%.3f, n=%d)\n",
			k, median(a, n), median(b, n), median(r, n), lo, hi, n
	}
}' "$out" | sort
