#!/usr/bin/env bash
# devdb-check.sh: proves `make demo` works on a machine where no Postgres answers
# (docs/operations.md, "A private Postgres for development"). The default server is looked for on
# a closed port, so scripts/devdb.sh creates a private cluster in a temporary folder; the demo must
# start on it, answer one verification over HTTP, stop on Ctrl-C (SIGINT to its process group, as
# a terminal sends it), and the private cluster must be stopped afterwards. About 10-60 s after the
# build; .ci/run runs it before `make test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="/usr/local/go/bin:$PATH"

say() { printf '[devdb-check] %s\n' "$*"; }
fail() { say "FAIL: $*"; for f in out err; do [ -s "$tmp/$f" ] && { say "--- demo std$f:"; tail -n 30 "$tmp/$f"; }; done; exit 1; }

answers() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

closed=""
for p in 1 9 47 1023; do
  if ! answers "$p"; then closed=$p; break; fi
done
[ -n "$closed" ] || { say "FAIL: no closed loopback port to point the probe at"; exit 1; }

tmp=$(mktemp -d /tmp/mailvet-devdb-check.XXXXXX)
chmod 755 "$tmp" # the postgres user, when root runs this, must reach the cluster inside
demo_pid=""
cleanup() {
  if [ -n "$demo_pid" ] && kill -0 "$demo_pid" 2>/dev/null; then kill -KILL -- "-$demo_pid" 2>/dev/null || true; fi
  MAILVET_DEVDB_DIR="$tmp/pg" scripts/devdb.sh stop 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

export MAILVET_DEVDB_PROBE="127.0.0.1:$closed" MAILVET_DEVDB_DIR="$tmp/pg"
unset DATABASE_URL
say "building; then make demo with nothing answering on 127.0.0.1:$closed"
make --no-print-directory build >/dev/null

# Job control puts the demo in its own process group, which does not ignore SIGINT.
set -m
MAILVET_HTTP_ADDR=127.0.0.1:0 MAILVET_METRICS_ADDR=127.0.0.1:0 NATS_URL= \
  make --no-print-directory demo >"$tmp/out" 2>"$tmp/err" &
demo_pid=$!
set +m

start=$SECONDS
until grep -q '^Mailvet is running on' "$tmp/out" 2>/dev/null; do
  kill -0 "$demo_pid" 2>/dev/null || fail "make demo exited before it was ready"
  ((SECONDS - start < 60)) || fail "make demo was not ready within 60 s"
  sleep 0.25
done
say "ready in $((SECONDS - start)) s"
grep -q "using the project's private Postgres" "$tmp/err" || fail "the demo did not use the private cluster"
base=$(sed -n 's/^Mailvet is running on \(http[^ ]*\) .*/\1/p' "$tmp/out")
key=$(sed -n 's/^  standard key (verify API): *\([^ ]*\)$/\1/p' "$tmp/out")
[ -n "$base" ] && [ -n "$key" ] || fail "no base URL or standard key in the banner"

body=$(curl -sS --max-time 30 "$base/v1/email/verify" -H "Authorization: Bearer $key" \
  -H 'Content-Type: application/json' -d '{"email":"ann@acme.example"}') || fail "the verification request failed"
say "verify ann@acme.example: $body"
grep -q '"status":"deliverable"' <<<"$body" || fail "ann@acme.example is not deliverable"

kill -INT -- "-$demo_pid"
stop=$SECONDS
while kill -0 "$demo_pid" 2>/dev/null; do
  ((SECONDS - stop < 30)) || fail "make demo did not stop within 30 s of Ctrl-C"
  sleep 0.25
done
demo_pid=""
grep -q 'private Postgres stopped' "$tmp/err" || fail "the private cluster was not stopped"
[ ! -f "$tmp/pg/postmaster.pid" ] || fail "the private cluster still runs ($tmp/pg/postmaster.pid)"
say "ok: the demo ran on the private cluster, answered, stopped, and stopped the cluster"
