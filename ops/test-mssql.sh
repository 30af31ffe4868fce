#!/usr/bin/env bash
# Verifies the SQL Server backend with one command, for anyone with Docker: starts SQL Server
# 2022 in a throwaway container on a free loopback port, waits until it answers, runs the SQL
# Server suites only (the conformance, guarantee and chaos tests named `mssql`, which every test
# run lists as ignored) against it twice, and removes the container whatever happens. Each test
# creates a database of its own there and drops it: in the first run under read committed
# snapshot isolation (RCSI, Azure SQL Database's default), in the second without it
# (OUTBOX_MSSQL_RCSI=off: locking READ COMMITTED, SQL Server's on-premises default, where a
# plain read waits for a row another transaction writes; issue 34).
# The generated sa password never appears in what this prints.
set -euo pipefail
cd "$(dirname "$0")/.."

image=mcr.microsoft.com/mssql/server:2022-latest
name="outbox-mssql-$$"

if ! docker info >/dev/null 2>&1; then
    echo "ops/test-mssql.sh needs Docker: 'docker info' failed (is Docker installed and its daemon running," >&2
    echo "and may this user reach it?). Without Docker, set OUTBOX_MSSQL_URL to a SQL Server 2022 login" >&2
    echo "that may CREATE DATABASE and run: cargo test --workspace -- --include-ignored mssql" >&2
    exit 1
fi

# SQL Server's policy wants 8+ characters from three of: upper case, lower case, digits,
# symbols. Random hex (lower case and digits) between fixed upper-case and symbol characters.
random_hex=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
password="Ox-${random_hex:0:28}-A"

# Percent-encodes everything but RFC 3986's unreserved characters, for the URL's password.
percent_encode() {
    local LC_ALL=C s=$1 out="" c i
    for ((i = 0; i < ${#s}; i++)); do
        c=${s:i:1}
        case $c in
            [A-Za-z0-9._~-]) out+=$c ;;
            *) out+=$(printf '%%%02X' "'$c") ;;
        esac
    done
    printf '%s' "$out"
}

# Prints stdin with the password (plain and encoded) masked: awk reads it from the
# environment, never from its arguments, and replaces it as a literal string.
mask() {
    MASK_1="$password" MASK_2="$(percent_encode "$password")" awk '
        function hide(line, secret,    i, out) {
            if (secret == "") return line
            out = ""
            while ((i = index(line, secret)) > 0) {
                out = out substr(line, 1, i - 1) "***"
                line = substr(line, i + length(secret))
            }
            return out line
        }
        { print hide(hide($0, ENVIRON["MASK_1"]), ENVIRON["MASK_2"]); fflush() }'
}

cleanup() {
    docker rm -f "$name" >/dev/null 2>&1 || true
}
trap cleanup EXIT

echo "== starting $image as $name (docker, --rm; removed on exit)"
# The password reaches docker through its environment (-e NAME without a value), not argv.
MSSQL_SA_PASSWORD="$password" docker run --rm -d --name "$name" \
    -e ACCEPT_EULA=Y -e MSSQL_SA_PASSWORD \
    -p 127.0.0.1::1433 "$image" >/dev/null
# Docker picked a free loopback port for the container's 1433.
mapped=$(docker port "$name" 1433/tcp | head -n 1)
port=${mapped##*:}
echo "== SQL Server listens on 127.0.0.1:$port; waiting for it to answer (up to 120 s)"

ready=false
for ((waited = 0; waited < 120; waited += 2)); do
    if ! docker inspect "$name" >/dev/null 2>&1; then
        echo "the SQL Server container exited while starting (SQL Server needs at least 2 GB of memory" >&2
        echo "for the container, and an x86-64 host or emulation)" >&2
        exit 1
    fi
    # sqlcmd reads the password inside the container, from the variable passed by name.
    if SQLCMDPASSWORD="$password" docker exec -e SQLCMDPASSWORD "$name" sh -c \
        '/opt/mssql-tools18/bin/sqlcmd -C -S localhost -U sa -P "$SQLCMDPASSWORD" -Q "SELECT 1"' \
        >/dev/null 2>&1; then
        ready=true
        break
    fi
    sleep 2
done
if [ "$ready" != true ]; then
    echo "SQL Server did not answer within 120 s; the container's last log lines:" >&2
    docker logs --tail 40 "$name" 2>&1 | mask >&2 || true
    exit 1
fi
echo "== SQL Server answered after about ${waited} s"

OUTBOX_MSSQL_URL="mssql://sa:$(percent_encode "$password")@127.0.0.1:${port}/master?TrustServerCertificate=true"
export OUTBOX_MSSQL_URL
echo "== OUTBOX_MSSQL_URL=mssql://sa:***@127.0.0.1:${port}/master?TrustServerCertificate=true"

# One run of the SQL Server suites with RCSI $1 (on or off).
run_suites() {
    local log status start elapsed server_tests ran_ok failed skipped passed
    log=$(mktemp)
    echo "== RCSI $1: cargo test --workspace --locked --no-fail-fast -- --include-ignored mssql (the SQL Server suites only)"
    start=$(date +%s)
    status=0
    # --no-fail-fast: a failing crate must not keep the later crates' SQL Server tests from running.
    OUTBOX_MSSQL_RCSI="$1" cargo test --workspace --locked --no-fail-fast -- --include-ignored mssql 2>&1 | mask | tee "$log" || status=$?
    elapsed=$(($(date +%s) - start))

    echo
    echo "== RCSI $1: what ran against SQL Server ($elapsed s):"
    grep -E '^test .* \.\.\. ' "$log" | sed 's/^test /  /' || echo "  (no test ran)"
    # The filter also selects unit tests of the store's mssql module; count only the tests that ran
    # against the server: the suites' mssql:: variants and the mssql chaos run.
    server_tests='^test (.*::)?mssql(::.*)? \.\.\. '
    ran_ok=$(grep -E "$server_tests" "$log" | grep -vE '^test mssql::(config|error|stmt|driver|dispatch|admin|lease|subset_tests|tests)::' | grep -cE ' ok$' || true)
    failed=$(grep -cE '^test .* \.\.\. FAILED$' "$log" || true)
    # A test that needs what Babelfish lacks returns early there and says so (tests/support/
    # babelfish.rs): cargo counts it ok, so it is counted as skipped, never as passed.
    skipped=$(grep -c 'SKIPPED on Babelfish only' "$log" || true)
    passed=$((ran_ok - skipped))
    if [ "$skipped" -gt 0 ]; then
        echo "== skipped on Babelfish only, each with its reason:"
        grep -o 'SKIPPED on Babelfish only: [^*]*' "$log" | sed 's/^SKIPPED on Babelfish only: /  /' | sort
    fi
    echo "== RCSI $1: $passed passed, $failed failed, $skipped skipped"
    rm -f "$log"
    if [ "$status" -ne 0 ]; then
        echo "== RCSI $1: SQL Server suites FAILED (cargo test exited with $status)" >&2
        return "$status"
    fi
    if [ "$passed" -eq 0 ]; then
        echo "== RCSI $1: no SQL Server test ran: nothing was verified" >&2
        return 1
    fi
    echo "== RCSI $1: SQL Server suites passed"
}

run_suites on
run_suites off
