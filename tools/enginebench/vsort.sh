#!/bin/bash
# vsort.sh runs enginebench against ONNX Runtime several times in a row
# and, for each model and batch size, prints the median of the per-run
# ratios ours / ONNX Runtime with their range: on a shared VM whose speed
# drifts between minutes, one run's ratio can be off by 1.5x either way;
# the cpu backend and ONNX Runtime of one run are measured within a minute
# of each other.
#
#	tools/enginebench/vsort.sh BIN [rounds] [models] [batches] [time]
#
# e.g. tools/enginebench/vsort.sh bin/enginebench 5 resnet18,mobilenetv2,resnet50,bert 1,8 1s
set -euo pipefail
if [ $# -lt 1 ]; then
	sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
fi
BIN=$1 R=${2:-5} M=${3:-resnet18,mobilenetv2,resnet50} BS=${4:-1} T=${5:-1s}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for i in $(seq "$R"); do
	"$BIN" -models "$M" -batches "$BS" -time "$T" -rounds 1 -preempt-trials 0 2>&1 |
		awk -F'|' -v i="$i" '($3 ~ /^ cpu $/ || $3 ~ /^ ort $/) && $4 ~ /^ [0-9]+ $/ {
			gsub(/ /, "", $2); gsub(/ /, "", $3); gsub(/ /, "", $4); gsub(/ /, "", $5)
			print i, $3, $2 "/" $4, $5 }' >>"$out"
done
awk '{ v[$1 " " $2 " " $3] = $4; keys[$3] = 1; runs[$1] = 1 }
END {
	for (k in keys) {
		n = 0
		for (i in runs) {
			c = v[i " cpu " k]; o = v[i " ort " k]
			if (c != "" && o != "" && o > 0) r[++n] = c / o
		}
		if (n == 0) continue
		for (a = 1; a <= n; a++) for (b = a + 1; b <= n; b++) if (r[b] < r[a]) { t = r[a]; r[a] = r[b]; r[b] = t }
		med = n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
		printf "%s: ours / ONNX Runtime median %.2f (range %.2f-%.2f, n=%d)\n", k, med, r[1], r[n], n
		delete r
	}
}' "$out" | sort
