#!/usr/bin/env bash
# devdb.sh: the Postgres that `make run`, `make demo`, `make test` and .ci/run use
# (docs/operations.md, "A private Postgres for development").
#
#   devdb.sh exec CMD [ARG...]  run CMD with DATABASE_URL set: the caller's DATABASE_URL, else the
#                               default server when it answers, else the project's private cluster,
#                               which is started for CMD and stopped after it when this call started it
#   devdb.sh start              start the private cluster (creating it on first use); print its URL
#   devdb.sh stop               stop the private cluster
#   devdb.sh url                print the URL CMD would get from exec (starting nothing)
#   devdb.sh binaries           find (or, as root on Debian/Ubuntu, install) initdb and pg_ctl; print their folder
#
# The private cluster lives in .data/pg (MAILVET_DEVDB_DIR), listens on 127.0.0.1 on a free port and
# keeps its data between runs. MAILVET_DEVDB_PROBE (host:port, default 127.0.0.1:5432) is where
# the default server is looked for; it is used when it answers and, where psql is at hand, lets
# the user postgres in without a password (a freshly installed Debian cluster does not).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
pgdata=${MAILVET_DEVDB_DIR:-$root/.data/pg}
probe=${MAILVET_DEVDB_PROBE:-127.0.0.1:5432}

say() { printf 'devdb: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

# answers reports whether something accepts TCP connections on host:port, within two seconds.
answers() {
  local host=${1%:*} port=${1##*:}
  timeout 2 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null
}

# default_usable reports whether the default server answers and takes the binaries' default login.
default_usable() {
  local psql
  answers "$probe" || return 1
  psql=$(command -v psql || true)
  [ -n "$psql" ] || psql=$(find_bindir 2>/dev/null)/psql
  [ -x "$psql" ] || return 0
  PGCONNECT_TIMEOUT=3 "$psql" "postgres://postgres@$probe/postgres?sslmode=disable" -Atqc 'select 1' </dev/null >/dev/null 2>&1 && return 0
  say "a Postgres answers on $probe but does not let the user postgres in without a password"
  return 1
}

# find_bindir prints the folder holding initdb and pg_ctl: PATH first, then Debian's and Homebrew's
# versioned folders (the newest version wins).
find_bindir() {
  local d
  if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
    dirname "$(command -v initdb)"; return 0
  fi
  for d in $(ls -d /usr/lib/postgresql/*/bin /opt/homebrew/opt/postgresql*/bin /usr/local/opt/postgresql*/bin \
    /opt/homebrew/bin /usr/local/bin 2>/dev/null | sort -rV); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
  done
  return 1
}

binaries() {
  local d
  if d=$(find_bindir); then echo "$d"; return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "no Postgres binaries found: installing Debian's postgresql package"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    if d=$(find_bindir); then echo "$d"; return 0; fi
    die "apt-get installed postgresql, but no initdb and pg_ctl were found under /usr/lib/postgresql"
  fi
  die "no Postgres found (initdb and pg_ctl). Install PostgreSQL 14 or newer:
  Debian/Ubuntu: sudo apt-get install postgresql
  macOS:         brew install postgresql@17
  Fedora:        sudo dnf install postgresql-server
or start any Postgres and set DATABASE_URL (docs/operations.md, \"A private Postgres for development\")."
}

# Postgres refuses to run as root: root runs the cluster as the postgres system user, which owns it.
as_pg() {
  if [ "$(id -u)" != 0 ]; then "$@"; return; fi
  (cd / && runuser -u postgres -- "$@")
}

prepare_owner() {
  [ "$(id -u)" = 0 ] || return 0
  if ! id postgres >/dev/null 2>&1; then
    say "creating the system user postgres to run the private cluster"
    useradd --system --user-group --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin postgres
  fi
  mkdir -p "$pgdata"
  chown postgres: "$pgdata"
  chmod 700 "$pgdata"
  as_pg test -w "$pgdata" ||
    die "the postgres user cannot reach $pgdata (a parent folder is not searchable by others); set MAILVET_DEVDB_DIR to a folder it can reach"
}

# port prints the port of the running cluster, from its postmaster.pid (4th line).
port() { sed -n 4p "$pgdata/postmaster.pid" 2>/dev/null; }

running() {
  local bindir=$1
  [ -f "$pgdata/postmaster.pid" ] && as_pg "$bindir/pg_ctl" -D "$pgdata" status >/dev/null 2>&1
}

url_for() { echo "postgres://postgres@127.0.0.1:$1/mailvet?sslmode=disable"; }

# start starts the cluster unless it runs; it prints "started" or "running" and then the URL.
start() {
  local bindir lock port p
  bindir=$(binaries)
  mkdir -p "$(dirname "$pgdata")"
  # Two makes starting at once must not both create or start the cluster.
  exec 9>"$pgdata.lock"
  if command -v flock >/dev/null; then flock 9; fi
  prepare_owner
  if running "$bindir"; then
    echo running; url_for "$(port)"; return 0
  fi
  if [ ! -f "$pgdata/PG_VERSION" ]; then
    say "creating the private cluster in $pgdata"
    mkdir -p "$pgdata"
    [ "$(id -u)" = 0 ] && chown postgres: "$pgdata"
    as_pg "$bindir/initdb" -D "$pgdata" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >/dev/null 2>&1 ||
      as_pg "$bindir/initdb" -D "$pgdata" -U postgres --auth=trust --encoding=UTF8 --locale=C >/dev/null
    # Loopback TCP only: no unix socket, whose default folder a non-root user may not write.
    printf "listen_addresses = '127.0.0.1'\nunix_socket_directories = ''\n" | as_pg tee -a "$pgdata/postgresql.conf" >/dev/null
  fi
  # A free port: the first of a few candidates nothing answers on (the postmaster refuses a
  # taken one, and the next is tried).
  for p in 54329 54339 54349 54359 54369 54379 54389 54399; do
    answers "127.0.0.1:$p" && continue
    if as_pg "$bindir/pg_ctl" -D "$pgdata" -l "$pgdata/server.log" -o "-p $p" -w -t 60 start >/dev/null; then
      say "private Postgres started on 127.0.0.1:$p (data in $pgdata)"
      echo started; url_for "$p"; return 0
    fi
  done
  die "the private cluster did not start; see $pgdata/server.log"
}

stop() {
  local bindir
  bindir=$(find_bindir) || return 0
  if running "$bindir"; then
    as_pg "$bindir/pg_ctl" -D "$pgdata" -m fast -w -t 60 stop >/dev/null
    say "private Postgres stopped"
  fi
}

# url prints the URL exec would use without starting anything: empty when the default answers.
url() {
  local bindir
  if [ -n "${DATABASE_URL:-}" ]; then echo "$DATABASE_URL"; return; fi
  if default_usable; then return; fi
  bindir=$(find_bindir) || return 0
  if running "$bindir"; then url_for "$(port)"; fi
}

run() {
  local out state rc=0
  if [ -n "${DATABASE_URL:-}" ] || default_usable; then
    exec "$@" # the caller's server, or the default one the binaries and tests fall back to
  fi
  say "DATABASE_URL is unset and no usable Postgres answers on $probe: using the project's private Postgres"
  out=$(start)
  state=$(sed -n 1p <<<"$out")
  export DATABASE_URL
  DATABASE_URL=$(sed -n 2p <<<"$out")
  if [ "$state" = running ]; then
    exec "$@" # another command started it and stops it
  fi
  # This call started the cluster, so it stops it when CMD ends, however it ends. Ctrl-C reaches
  # CMD too (same process group); bash runs the trap once CMD has exited.
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap stop EXIT
  "$@" || rc=$?
  exit "$rc"
}

case "${1:-}" in
exec) shift; [ $# -gt 0 ] || die "usage: devdb.sh exec CMD [ARG...]"; run "$@" ;;
start) start | sed -n 2p ;;
stop) stop ;;
url) url ;;
binaries) binaries ;;
*) die "usage: devdb.sh exec CMD [ARG...] | start | stop | url | binaries" ;;
esac
