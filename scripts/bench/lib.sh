# Shared by bench scripts (sourced): start/stop a Tansu broker, wait for a port, read a
# process's CPU time. The older scripts still carry their own copies of these lines; new
# scripts source this file instead.

# Starts Tansu on core 1 at port $1 in a fresh directory; sets TANSU_DIR.
bench_tansu_start() {
  scripts/tansu.sh install >/dev/null
  TANSU_DIR=$(mktemp -d /tmp/floodgate-bench-tansu.XXXXXX)
  taskset -c 1 scripts/tansu.sh start "$1" "$TANSU_DIR" >/dev/null
}

bench_tansu_stop() {
  scripts/tansu.sh stop "$TANSU_DIR" >/dev/null
}

# Waits up to 10 s for a TCP port on loopback to accept.
wait_port() {
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return
    sleep 0.1
  done
}

# User + system CPU of a process so far, in clock ticks (1/100 s).
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# SHA-256 of an API key, as tenants list it.
digest() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
