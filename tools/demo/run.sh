#!/usr/bin/env bash
# The end-to-end demo behind `make run`: a veth pair with one end in a
# network namespace of its own, sluice on the other end through DPDK's
# net_af_packet, framecast streaming frames from inside the namespace for
# DURATION, then a report. Everything it creates is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

NS=slrun
DEV=slrun0      # DPDK side, root namespace
PEER=slrun1     # client side, inside $NS
APP_IP=10.99.1.1
CLIENT_IP=10.99.1.2
DURATION=${DURATION:-20s}
PROFILE=${PROFILE:-profiles/demo.toml}
LOG=${LOG:-/tmp/sluice-demo.log}

[ "$(id -u)" = 0 ] || { echo "make run needs root (DPDK, network namespaces)" >&2; exit 1; }

pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  ip netns del "$NS" 2>/dev/null || true
  ip link del "$DEV" 2>/dev/null || true
  rm -rf /var/run/dpdk/sluice-demo
}
trap cleanup EXIT
cleanup

ip netns add "$NS"
ip link add "$DEV" type veth peer name "$PEER"
ip link set "$PEER" netns "$NS"
ip link set "$DEV" up
# The root-namespace end carries no address: frames to $APP_IP are for
# DPDK, which answers ARP for it. Offloads off so af_packet sees whole,
# checksummed frames.
ethtool -K "$DEV" tx off rx off gro off gso off tso off >/dev/null 2>&1 || true
ip netns exec "$NS" ip addr add "$CLIENT_IP/24" dev "$PEER"
ip netns exec "$NS" ip link set "$PEER" up
ip netns exec "$NS" ip link set lo up
ip netns exec "$NS" ethtool -K "$PEER" tx off rx off gro off gso off tso off >/dev/null 2>&1 || true

echo "== starting sluice ($PROFILE), log in $LOG"
bin/sluice -profile "$PROFILE" >"$LOG" 2>&1 &
pid=$!
# wait until it serves (model compilation takes a few seconds)
for _ in $(seq 1 120); do
  grep -q "sluice serving" "$LOG" && break
  kill -0 "$pid" 2>/dev/null || { echo "sluice exited:"; cat "$LOG"; exit 1; }
  sleep 0.5
done
grep -q "sluice serving" "$LOG" || { echo "sluice did not start:"; tail -20 "$LOG"; exit 1; }
grep -E "IF loaded|port open" "$LOG" | sed 's/^/   /'

# Resolve the appliance's MAC first (DPDK answers ARP; it ignores the ping
# itself): a frame's first fragments would otherwise overflow the kernel's
# queue of packets waiting for ARP.
ip netns exec "$NS" ping -c 1 -W 1 "$APP_IP" >/dev/null 2>&1 || true
ip netns exec "$NS" ip neigh show "$APP_IP" | grep -q lladdr ||
  echo "warning: $APP_IP is not resolved (ARP): the first frames may overflow the kernel's queue of packets waiting for it"

echo "== framecast for $DURATION: RT MobileNetV2 at 15 frames/s, BE ResNet-50 at 2 frames/s, 224x224x3 frames"
ip netns exec "$NS" bin/framecast -target "$APP_IP:9400" -duration "$DURATION" -json /tmp/framecast-demo.json \
  -stream model=1,class=rt,rate=15,size=150528,arrival=poisson \
  -stream model=2,class=be,rate=2,size=150528

# What the scheduler did: the appliance's own counters, read over plain
# HTTP with bash's /dev/tcp (no curl needed).
METRICS=$(sed -n 's/^metrics *= *"\([0-9.]*\):\([0-9]*\)".*/\1 \2/p' "$PROFILE" | head -1)
if [ -n "$METRICS" ]; then
  set -- $METRICS
  if exec 3<>"/dev/tcp/$1/$2" 2>/dev/null; then
    printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" >&3
    echo "== appliance metrics (http://$1:$2/metrics)"
    grep -E '^sluice_(preemptions_total|restores_total|pad_blocks_total|sched_jobs_total|if_responses_total|preemption_latency_seconds_(sum|count|bucket))' <&3 | sed 's/^/   /'
    exec 3<&-
  fi
fi

echo "== stopping sluice (SIGTERM: drain)"
kill -TERM "$pid"
wait "$pid" && echo "sluice exited 0" || { echo "sluice exited $?"; tail -20 "$LOG"; exit 1; }
pid=""
echo "== sluice's final counters"
grep -F 'msg="final counters"' "$LOG" | sed 's/^/   /'
