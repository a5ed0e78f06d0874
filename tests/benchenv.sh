# Shared by tests/bench-proxy and tests/profile-edge (sourced, not run):
# the binaries, the configuration and the load they use, on loopback.
#
# bench_setup DIR: builds ratewarden, benchproxy and profilesplit into DIR;
# writes DIR/seed.yaml (examples/seed.yaml with the loopback as its
# trusted proxy: wrk stands for the proxy in front of the edge) and
# DIR/xff.lua (each request from another client address, in
# X-Forwarded-For, to /api/search?q=shoes).
bench_setup() {
  local dir=$1
  go build -o "$dir/ratewarden" ./cmd/ratewarden
  go build -o "$dir/benchproxy" ./tests/benchproxy
  go build -o "$dir/profilesplit" ./tests/profilesplit
  sed 's/^  trusted_proxies: \[\]$/  trusted_proxies: [127.0.0.1]/' examples/seed.yaml >"$dir/seed.yaml"
  grep -q '^  trusted_proxies: \[127.0.0.1\]$' "$dir/seed.yaml" ||
    { echo "$0: examples/seed.yaml: no 'trusted_proxies: []' line to set" >&2; return 1; }
  cat >"$dir/xff.lua" <<'LUA'
local n = 0
request = function()
  n = n + 1
  wrk.headers["X-Forwarded-For"] = string.format("10.%d.%d.%d", math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
  return wrk.format(nil, "/api/search?q=shoes")
end
LUA
  # RATE=N paces wrk's 32 connections to about N requests a second in all
  # (each waits 32000/N ms before its next request).
  if [ -n "${RATE:-}" ]; then
    echo "delay = function() return $((32000 / RATE)) end" >>"$dir/xff.lua"
  fi
}

# wait_port PORT...: waits up to 5 s for each loopback port to accept.
wait_port() {
  local port
  for port in "$@"; do
    for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
  done
}

# cpu_ticks PID...: user + system CPU of the processes, in clock ticks
# (getconf CLK_TCK a second), from /proc/PID/stat.
cpu_ticks() {
  local t=0 pid
  for pid in "$@"; do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$t"
}
