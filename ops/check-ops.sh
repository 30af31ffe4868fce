#!/usr/bin/env bash
# Checks the deployment files in ops/, each with the tool that understands it (ops/README.md
# says what each check covers and what is not verified):
#   prometheus/   promtool check rules, promtool test rules
#   systemd/      systemd-analyze verify, systemd-analyze security --offline
#   kubernetes/   kubernetes-validate --strict, then cross-references and `check-config`
#   grafana/      JSON structure; every query parsed by promtool
#   Dockerfile    paths, workspace members, compile-time includes, binaries (not built)
#   RUNBOOK.md    every outboxctl command and flag exists
#   and every metric the rules and the dashboard name is exported by a running dispatcher.
# Needs target/debug/outbox-dispatcher and target/debug/outboxctl (ops/test.sh builds them).
# promtool (Debian package prometheus) is installed with apt-get when missing and we are root;
# kubernetes-validate goes into a virtualenv under target/.
set -euo pipefail
cd "$(dirname "$0")/.."

work=target/ops-check
bin=target/debug
venv=$work/venv
kubernetes_validate=1.37.0

say() { printf 'ops check: %s\n' "$*"; }
fail() { printf 'ops check: FAILED: %s\n' "$*" >&2; exit 1; }
# Runs a command quietly; on failure shows what it said and stops.
quiet() {
    local out
    if ! out=$("$@" 2>&1); then
        printf '%s\n' "$out" >&2
        fail "$*"
    fi
    printf '%s' "$out"
}
apt_install() {
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing $* (apt-get)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    else
        fail "$1 is missing and cannot be installed (not root or no apt-get): install it"
    fi
}

for b in outbox-dispatcher outboxctl; do
    [ -x "$bin/$b" ] || fail "$bin/$b is missing: cargo build --locked -p outbox-dispatcher -p outboxctl"
done
command -v promtool >/dev/null 2>&1 || apt_install prometheus
command -v systemd-analyze >/dev/null 2>&1 || apt_install systemd
mkdir -p "$work"
if [ "$("$venv/bin/kubernetes-validate" --version 2>/dev/null)" != "$kubernetes_validate" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$kubernetes_validate"
fi
py=("$venv/bin/python" ops/check-ops.py)

# --- Prometheus rules: syntax, then the unit tests (each alert firing and quiet) ---------------
out=$(quiet promtool check rules ops/prometheus/outbox.rules.yml)
say "promtool check rules: $(grep -o 'SUCCESS: .*' <<<"$out") ($(promtool --version | head -1 | cut -d' ' -f1-3))"
quiet promtool test rules ops/prometheus/outbox.rules.test.yml >/dev/null
"${py[@]}" rules

# --- systemd: the unit as shipped, in a throwaway root where /usr/local/bin/outbox-dispatcher is
# the binary built here (verify checks that ExecStart exists) and the system's own units are.
# verify exits 0 on unknown keys and bad values, only printing them: any output fails.
root=$work/systemd-root
rm -rf "$root"
mkdir -p "$root/usr/local/bin" "$root/etc/systemd/system" "$root/usr/lib/systemd"
ln "$bin/outbox-dispatcher" "$root/usr/local/bin/" 2>/dev/null || cp "$bin/outbox-dispatcher" "$root/usr/local/bin/"
cp -a "$(readlink -f /usr/lib/systemd/system)" "$root/usr/lib/systemd/system"
cp ops/systemd/outbox-dispatcher.service "$root/etc/systemd/system/"
out=$(systemd-analyze verify --root="$root" "$root/etc/systemd/system/outbox-dispatcher.service" 2>&1) \
    || { printf '%s\n' "$out" >&2; fail "systemd-analyze verify"; }
[ -z "$out" ] || { printf '%s\n' "$out" >&2; fail "systemd-analyze verify printed warnings"; }
say "systemd-analyze verify: ops/systemd/outbox-dispatcher.service has no error or warning ($(systemd-analyze --version | head -1))"
# --threshold counts in tenths of the printed level: 20 fails anything above 2.0.
out=$(quiet systemd-analyze security --offline=yes --threshold=20 ops/systemd/outbox-dispatcher.service)
say "systemd-analyze security --offline: $(grep -o 'exposure level .*' <<<"$out" | sed 's/ [^ ]*$//') (fails above 2.0)"
"${py[@]}" systemd
rm -rf "$root"

# --- Kubernetes: schemas (strict: unknown fields fail), then how the files fit together --------
# kubernetes-validate has no schema for CRDs: for them it prints WARN and exits 0. Only the
# ServiceMonitor may be skipped that way; any other WARN (a misspelt kind) fails.
mapfile -t manifests < <(find ops/kubernetes -name '*.yaml' | sort)
out=$("$venv/bin/kubernetes-validate" --strict "${manifests[@]}" 2>&1) || { printf '%s\n' "$out" >&2; fail "kubernetes-validate"; }
unexpected=$(grep -v '^INFO ' <<<"$out" | grep -v '^WARN ops/kubernetes/servicemonitor.yaml .* kind ServiceMonitor ' || true)
[ -z "$unexpected" ] || { printf '%s\n' "$unexpected" >&2; fail "kubernetes-validate: a resource was not validated"; }
say "kubernetes-validate $kubernetes_validate --strict: $(grep -c '^INFO .* passed' <<<"$out") resources valid ($(grep -o 'against version [0-9.]*' <<<"$out" | head -1)); the ServiceMonitor skipped (no schema for a CRD), checked against the Service below"
"${py[@]}" kubernetes "$bin/outbox-dispatcher"

# --- Grafana: structure, then every query through promtool's PromQL parser ---------------------
"${py[@]}" dashboard "$work/dashboard-queries.rules.yml"
out=$(quiet promtool check rules "$work/dashboard-queries.rules.yml")
say "dashboard: promtool parsed every query ($(grep -o 'SUCCESS: .*' <<<"$out"))"

# --- Dockerfile, runbook commands, and the metric names against a running dispatcher ----------
"${py[@]}" dockerfile "$bin"
"${py[@]}" runbook "$bin/outboxctl"
"${py[@]}" metrics "$bin/outbox-dispatcher"
say "all passed"
