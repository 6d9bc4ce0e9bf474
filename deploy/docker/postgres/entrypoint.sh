#!/bin/sh
# First start: initdb, a password-protected role and database; every start:
# listen on every address with scram-sha-256 for network clients.
set -eu
: "${POSTGRES_USER:=swarm}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "swarm-postgres: POSTGRES_PASSWORD must be set" >&2
    exit 1
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
        --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    echo "host all all 0.0.0.0/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
    echo "host all all ::/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        postgres --single -D "$PGDATA" -c listen_addresses='' postgres >/dev/null <<SQL
CREATE DATABASE "$POSTGRES_DB" OWNER "$POSTGRES_USER";
SQL
    fi
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c max_connections="${POSTGRES_MAX_CONNECTIONS:-200}"
