#!/usr/bin/env bash
# A throwaway PostgreSQL server for the dsh-postgres tests, on 127.0.0.1.
#
#   eval "$(bash adapters/postgres/ci/server.sh start)"   # exports DSH_TEST_POSTGRES_URL, DSH_PG_DIR
#   bash adapters/postgres/ci/server.sh stop "$DSH_PG_DIR"
#
# `start` installs Debian's `postgresql` package when initdb/pg_ctl are
# missing (root only), creates a cluster in a new temporary directory owned
# by the `postgres` system user (the server refuses to run as root), with a
# random password (scram-sha-256) and TCP on 127.0.0.1 only, on a free port.
# It prints shell `export` lines on stdout; everything else goes to stderr.
set -euo pipefail

find_bin() {
    local d
    for d in /usr/lib/postgresql/*/bin; do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
            echo "$d"
            return 0
        fi
    done
    return 1
}

as_pg() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

case "${1:-}" in
start)
    if ! BIN=$(find_bin); then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "installing Debian's postgresql package" >&2
            apt-get update -qq >&2
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
        fi
        BIN=$(find_bin) || { echo "no PostgreSQL server binaries (initdb, pg_ctl) found" >&2; exit 1; }
    fi
    DIR=$(mktemp -d /tmp/dsh-pg.XXXXXX)
    chmod 0755 "$DIR"
    PASS=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    printf '%s\n' "$PASS" > "$DIR/pw"
    mkdir "$DIR/data" "$DIR/sock"
    if [ "$(id -u)" = 0 ]; then
        chown -R postgres: "$DIR"
    fi
    as_pg "$BIN/initdb" -D "$DIR/data" -U postgres --auth=scram-sha-256 \
        --pwfile="$DIR/pw" -E UTF8 --locale=C.UTF-8 >"$DIR/initdb.log" 2>&1 \
        || { cat "$DIR/initdb.log" >&2; exit 1; }
    rm -f "$DIR/pw"
    as_pg "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR/sock -c max_connections=200" \
        start >&2 || { cat "$DIR/server.log" >&2; exit 1; }
    echo "PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT (data in $DIR)" >&2
    echo "export DSH_TEST_POSTGRES_URL='postgres://postgres:$PASS@127.0.0.1:$PORT/postgres'"
    echo "export DSH_PG_DIR='$DIR'"
    ;;
stop)
    DIR=${2:?usage: server.sh stop DIR}
    BIN=$(find_bin)
    as_pg "$BIN/pg_ctl" -D "$DIR/data" -m immediate -w stop >&2 || true
    rm -rf "$DIR"
    ;;
*)
    echo "usage: server.sh start | stop DIR" >&2
    exit 2
    ;;
esac
