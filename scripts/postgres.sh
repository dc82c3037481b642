#!/usr/bin/env bash
# A throwaway PostgreSQL server for the store's tests, on 127.0.0.1 only. Installs Debian's
# `postgresql` when it is missing (root or sudo), creates a cluster in a temporary folder owned by
# a non-root user (the server refuses to run as root), starts it, and prints the URL to export:
#
#   eval "$(scripts/postgres.sh)"      # sets BATON_TEST_POSTGRES_URL
#   cargo nextest run -E 'test(/^store::/)'   # the PostgreSQL cases run (otherwise SKIPPED)
#   scripts/postgres.sh stop
#
# Safe to run again: a server already running there is reused. Messages go to stderr; stdout
# carries only the export line.
set -euo pipefail

dir=${BATON_PG_DIR:-${TMPDIR:-/tmp}/baton-pg}
port=${BATON_PG_PORT:-55432}
user=baton

bin=""
for d in /usr/lib/postgresql/*/bin; do
  [ -x "$d/pg_ctl" ] && bin=$d
done
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ -z "$bin" ]; then
  echo "postgres.sh: installing postgresql" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && bin=$d
  done
  [ -n "$bin" ] || { echo "postgres.sh: no pg_ctl after installing postgresql" >&2; exit 1; }
fi

# Run the server's tools as a non-root user.
as() {
  if [ "$(id -u)" -eq 0 ]; then
    owner=postgres
    id "$owner" >/dev/null 2>&1 || owner=nobody
    runuser -u "$owner" -- "$@"
  else
    "$@"
  fi
}

if [ "${1:-}" = stop ]; then
  as "$bin/pg_ctl" -D "$dir/data" -m fast stop >&2 || true
  exit 0
fi

mkdir -p "$dir"
if [ "$(id -u)" -eq 0 ]; then
  owner=postgres
  id "$owner" >/dev/null 2>&1 || owner=nobody
  chown "$owner" "$dir"
fi
if [ ! -f "$dir/data/PG_VERSION" ]; then
  as "$bin/initdb" -D "$dir/data" -U "$user" -A trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
fi
if ! as "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
  as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c max_connections=200" \
    >&2 || { cat "$dir/server.log" >&2; exit 1; }
fi
echo "postgres.sh: PostgreSQL on 127.0.0.1:$port (data in $dir/data)" >&2
echo "export BATON_TEST_POSTGRES_URL=postgres://$user@127.0.0.1:$port/postgres"
