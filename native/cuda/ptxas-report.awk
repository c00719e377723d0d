# ptxas-report.awk: turns `ptxas -v` output (several files, each preceded
# by a line "== <file>") into one table: kernel, registers, shared memory,
# stack frame, spill stores/loads, and blocks of SG_THREADS threads per SM
# on sm_80 (register and shared-memory limits). Exits 1 when a kernel's
# spills (stores + loads, bytes) exceed its allowance: -v spill_max=N
# (default 0) and -v allow="name=N name=N" for exceptions.
BEGIN {
	threads = 256
	nk = 0
	split(allow, al, " ")
	for (i in al) {
		split(al[i], kv, "=")
		lim[kv[1]] = kv[2] + 0
	}
}
/^== / { file = $2; next }
/Compiling entry function/ {
	match($0, /'[^']*'/)
	cur = substr($0, RSTART + 1, RLENGTH - 2)
	order[++nk] = cur
	src[cur] = file
	next
}
/Function properties for/ { fp = $NF; next }
/bytes stack frame/ {
	if (fp == cur) {
		stack[cur] = $1
		sst[cur] = $5
		sld[cur] = $9
	}
	next
}
/Used [0-9]+ registers/ {
	for (i = 1; i <= NF; i++) {
		if ($(i + 1) ~ /^registers/)
			regs[cur] = $i
		if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/)
			smem[cur] = $i
	}
	next
}
function occupancy(r, s,    wr, bw, b, bs) {
	# sm_80: 64K registers, per-warp allocation in units of 256, 32 blocks,
	# 64 warps, 164 KiB shared memory (+1 KiB reserved per block)
	wr = int((r * 32 + 255) / 256) * 256
	if (wr == 0) wr = 256
	b = int(65536 / (wr * threads / 32))
	bw = int(64 / (threads / 32))
	if (bw < b) b = bw
	bs = int(167936 / (s + 1024))
	if (bs < b) b = bs
	return b
}
END {
	printf "%-18s %-12s %5s %7s %6s %7s %7s %7s\n", "kernel", "file", "regs", "smem", "stack", "spill-st", "spill-ld", "blk/SM"
	bad = 0
	for (i = 1; i <= nk; i++) {
		k = order[i]
		printf "%-18s %-12s %5d %7d %6d %7d %7d %7d\n", k, src[k], regs[k], smem[k] + 0, stack[k], sst[k], sld[k], occupancy(regs[k], smem[k] + 0)
		m = (k in lim) ? lim[k] : spill_max + 0
		if (sst[k] + sld[k] > m) {
			printf "ptxas-report: %s spills %d+%d bytes (allowed %d)\n", k, sst[k], sld[k], m > "/dev/stderr"
			bad = 1
		}
	}
	if (nk == 0) {
		print "ptxas-report: no kernels" > "/dev/stderr"
		bad = 1
	}
	exit bad
}
