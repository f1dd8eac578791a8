# Shared by every bench script: each one cds to the repository root and sources this file.
# Every helper the scripts have in common is defined here once, under one name; a script keeps
# only what is its own (its config, its load runs, its summary).
# shellcheck shell=bash

# The release binaries: cargo's target directory as cargo finds it (CARGO_TARGET_DIR, else
# ./target). FLOODGATE is the gateway a script starts; scripts that take a BIN_DIR set it.
BIN_DIR=${CARGO_TARGET_DIR:-target}/release
FLOODGATE=$BIN_DIR/floodgate
LOAD_BIN=$BIN_DIR/floodgate-load
# The load generator on core 0; floodgate, the broker and their helpers on core 1 (PIN). A
# script whose processes float (cluster.sh, status.sh) sets PIN=().
LOAD=(taskset -c 0 "$LOAD_BIN")
PIN=(taskset -c 1)
OUT=scripts/bench/out
mkdir -p "$OUT"
# The summaries' heredocs import scripts/bench/rounds.py: no __pycache__ in the tree.
export PYTHONDONTWRITEBYTECODE=1
# What the script started in the background; bench_cleanup (the EXIT trap) stops it.
PIDS=()

# Builds the release binaries unless both are already there.
bench_build() {
  if [ ! -x "$FLOODGATE" ] || [ ! -x "$LOAD_BIN" ]; then cargo build --release --workspace --bins; fi
}

# Starts Tansu at port $1 in a fresh directory (TANSU_DIR; its pid in TANSU_DIR/tansu.pid).
bench_tansu_start() {
  scripts/tansu.sh install >/dev/null
  TANSU_DIR=$(mktemp -d /tmp/floodgate-bench-tansu.XXXXXX)
  "${PIN[@]}" scripts/tansu.sh start "$1" "$TANSU_DIR" >/dev/null
}

bench_tansu_stop() {
  scripts/tansu.sh stop "$TANSU_DIR" >/dev/null
}

# Creates topics of 3 partitions on the broker at $1 (host:port): bench_topics BROKER TOPIC...
bench_topics() {
  local broker=$1 topic
  shift
  for topic in "$@"; do
    tansu topic create "$topic" --broker "tcp://$broker" --partitions 3 >/dev/null
  done
}

# Stops every process in PIDS and the script's Tansu, if it started one.
bench_cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -z "${TANSU_DIR:-}" ] || bench_tansu_stop
}

# Stops one process (SIGTERM: floodgate drains) and waits for it; it leaves PIDS.
bench_stop() {
  local p keep=()
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  PIDS=("${keep[@]}")
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

# CPU microseconds per unit: clock ticks $1 over $2 units (both may be expressions), rounded to
# $3 digits (3 unless given).
us_per() { python3 -c "print(round(($1)*1e4/($2),${3:-3}))"; }

# CPU microseconds per unit from a `/usr/bin/time -f "%U %S"` file $1, over $2 units.
time_us_per() {
  python3 -c "u,s=open('$1').read().split()[-2:];print(round((float(u)+float(s))*1e6/$2,3))"
}

# SHA-256 of an API key, as tenants list it.
digest() { printf %s "$1" | sha256sum | cut -d' ' -f1; }

# A field of the first tenant in a floodgate-load --json summary: json_tenant FILE FIELD.
json_tenant() {
  python3 -c "import json;print(json.load(open('$1'))['tenants'][0]['$2'])"
}

# The sections every bench config starts with: bench_config PORT ADMIN_PORT BROKER [LEVEL].
bench_config() {
  printf '[server]\nlisten = "127.0.0.1:%s"\nadmin_listen = "127.0.0.1:%s"\n' "$1" "$2"
  printf '[kafka]\nbootstrap_servers = "%s"\n[log]\nlevel = "%s"\n' "$3" "${4:-warn}"
}

# A tenant of a bench config: bench_tenant ID KEY TOPIC_PATTERN [LINE...], each LINE a setting
# of its own (e.g. "records_per_sec = 100").
bench_tenant() {
  printf '[[tenants]]\nid = "%s"\napi_key_sha256 = ["%s"]\ntopics = ["%s"]\n' "$1" "$(digest "$2")" "$3"
  shift 3
  [ $# -eq 0 ] || printf '%s\n' "$@"
}

# Starts $FLOODGATE (on PIN) with config $1 and output to $2, then waits for admin port $3; its
# pid goes to FG and PIDS. Settings from the environment reach it (FLOODGATE__...).
bench_floodgate() {
  "${PIN[@]}" "$FLOODGATE" --config "$1" > "$2" 2>&1 &
  FG=$!
  PIDS+=("$FG")
  wait_port "$3"
}

# Starts the do-nothing axum handler (floodgate-load null-server, on PIN) at port $1 and waits
# for it; its pid goes to NULL and PIDS.
bench_null() {
  "${PIN[@]}" "$LOAD_BIN" null-server --listen "127.0.0.1:$1" 2>/dev/null &
  NULL=$!
  PIDS+=("$NULL")
  wait_port "$1"
}

# Starts `$FLOODGATE dev` (in-process broker; listen addresses from FLOODGATE__SERVER__*) with
# output to $1 and waits up to 10 s for the API key it prints; sets FG (also in PIDS) and KEY.
bench_dev() {
  : > "$1" # a log of an earlier start must not give its key
  "${PIN[@]}" "$FLOODGATE" --config "${1%/*}/none.toml" dev > "$1" 2>&1 &
  FG=$!
  PIDS+=("$FG")
  KEY=""
  for _ in $(seq 1 200); do
    KEY=$(sed -n 's/^  API key: //p' "$1")
    [ -z "$KEY" ] || return 0
    sleep 0.05
  done
  cat "$1" >&2
  exit 1
}

# The direct librdkafka producer (floodgate-load direct, on PIN) with its CPU, user and
# system, in file $1: bench_direct TIME_FILE DIRECT_ARGS...
bench_direct() {
  local time_file=$1
  shift
  /usr/bin/time -f "%U %S" -o "$time_file" "${PIN[@]}" "$LOAD_BIN" direct "$@"
}

# One floodgate-load run (core 0, output dropped) with the CPU process $2 spent on it: appends
# "NAME TICKS_BEFORE TICKS_AFTER" to file $3. bench_cpu_run NAME PID FILE RUN_ARGS...
bench_cpu_run() {
  local name=$1 pid=$2 file=$3 c0
  shift 3
  c0=$(cpu "$pid")
  "${LOAD[@]}" run "$@" >/dev/null 2>&1
  echo "$name $c0 $(cpu "$pid")" >> "$file"
}

# A run's NAME=BINARY[+TOML] (ab.sh, instructions.sh): sets SPEC_NAME, SPEC_BIN and SPEC_CONFIG
# (config $2, or $2 with TOML's lines added to its last tenant, written to $OUT/$3-NAME.toml).
bench_spec() {
  SPEC_NAME=${1%%=*}
  SPEC_BIN=${1#*=}
  SPEC_CONFIG=$2
  if [[ $SPEC_BIN == *+* ]]; then
    SPEC_CONFIG=$OUT/$3-$SPEC_NAME.toml
    cat "$2" "${SPEC_BIN#*+}" > "$SPEC_CONFIG"
    SPEC_BIN=${SPEC_BIN%%+*}
  fi
}
