#!/usr/bin/env python3
"""The checks of ops/ that no off-the-shelf tool makes; ops/check-ops.sh runs the tools
(promtool, systemd-analyze, kubernetes-validate) and calls this for the rest. Each command
prints `ops check: ...` lines and exits 1 with the reasons when something does not hold.

    check-ops.py rules                  every alert: annotations, its RUNBOOK anchor, a firing and a quiet test
    check-ops.py dashboard OUT.yml      the dashboard's structure; its queries written as rules for promtool
    check-ops.py kubernetes DISPATCHER  the manifests agree with each other, the config and the Dockerfile;
                                        the ConfigMap passes `check-config` with the Deployment's variables
    check-ops.py systemd                the unit's stop timeout against the default shutdown_grace
    check-ops.py dockerfile BINDIR      every path copied exists; members, compile-time includes, binaries
    check-ops.py runbook OUTBOXCTL      every outboxctl command in RUNBOOK.md and README.md exists, flags too
    check-ops.py metrics DISPATCHER     every metric the rules, their tests and the dashboard name is
                                        exported by a running dispatcher

Needs PyYAML (check-ops.sh runs it in the virtualenv that holds kubernetes-validate).
"""

import json
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
OPS = ROOT / "ops"
RULES = OPS / "prometheus" / "outbox.rules.yml"
RULE_TESTS = OPS / "prometheus" / "outbox.rules.test.yml"
DASHBOARD = OPS / "grafana" / "outbox.json"
RUNBOOK = OPS / "RUNBOOK.md"
K8S = OPS / "kubernetes"
UNIT = OPS / "systemd" / "outbox-dispatcher.service"
DOCKERFILE = OPS / "Dockerfile"
METRIC = re.compile(r"\boutbox_[a-z0-9_]*[a-z0-9]\b")


class Failed(Exception):
    """A check that did not hold; the message says which and why."""


def say(text: str) -> None:
    print(f"ops check: {text}", flush=True)


def require(problems: list[str], what: str) -> None:
    if problems:
        raise Failed(f"{what}:\n  " + "\n  ".join(problems))


def seconds(text: str) -> float:
    """A config duration (500ms, 20s, 5m, 1h) in seconds."""
    m = re.fullmatch(r"(\d+)(ms|s|min|m|h)", text.strip())
    if not m:
        raise Failed(f"cannot read the duration {text!r}")
    return int(m[1]) * {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600}[m[2]]


def shown(path: Path) -> str:
    """A path as the repository names it."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def workspace() -> dict:
    return tomllib.loads((ROOT / "Cargo.toml").read_text())


# --- rules -------------------------------------------------------------------------------------


def alerts() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def github_slugs(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings: lowercase, punctuation dropped, spaces as -."""
    slugs = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m[1].strip().lower()).replace(" ", "-")
            slugs.add(slug)
    return slugs


def check_rules() -> None:
    base = workspace()["workspace"]["package"]["repository"] + "/blob/main/ops/RUNBOOK.md#"
    runbook = RUNBOOK.read_text()
    slugs = github_slugs(runbook)
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    firing, quiet, evaluations = set(), set(), 0
    for group in tests:
        for case in group.get("alert_rule_test", []):
            evaluations += 1
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    problems = []
    names = [a["alert"] for a in alerts()]
    for a in alerts():
        name, notes = a["alert"], a.get("annotations", {})
        for key in ("summary", "description", "runbook_url"):
            if not notes.get(key):
                problems.append(f"{name}: no {key} annotation")
        url = notes.get("runbook_url", "")
        if not url.startswith(base) or url[len(base):] not in slugs:
            problems.append(f"{name}: runbook_url {url!r} is not {base}<a heading of ops/RUNBOOK.md>")
        if name not in firing:
            problems.append(f"{name}: no test shows it firing ({RULE_TESTS.name})")
        if name not in quiet:
            problems.append(f"{name}: no test shows it quiet ({RULE_TESTS.name})")
    sections = re.findall(r"^## (Outbox\w+)", runbook, re.M)
    problems += [f"RUNBOOK.md has a section for {s}, which is not an alert" for s in sections if s not in names]
    for name in set(firing | quiet) - set(names):
        problems.append(f"{RULE_TESTS.name} tests {name}, which is not an alert")
    require(problems, "alert rules")
    say(f"promtool test rules: {len(tests)} tests, {evaluations} alert evaluations passed; "
        f"each of the {len(names)} alerts shown firing and quiet, each with its RUNBOOK.md section")


# --- dashboard ---------------------------------------------------------------------------------


def dashboard_queries(dash: dict) -> list[tuple[str, str]]:
    """(where, expression) for every panel target and every query variable."""
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append((f"panel {p['id']} {p['title']!r} target {t.get('refId')}", t.get("expr", "")))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            out.append((f"variable {v['name']}", q))
    return out


def as_promql(expr: str) -> str:
    """Grafana's variables replaced by values promtool can parse."""
    m = re.fullmatch(r"label_values\((?:(.*),\s*)?(\w+)\)", expr.strip())
    if m:  # a Grafana function, not PromQL: check the selector it reads
        expr = f"count by ({m[2]}) ({m[1] or 'up'})"
    for var, value in (("$__rate_interval", "5m"), ("$job", ".+"), ("$destination", ".*")):
        expr = expr.replace(var, value)
    return expr


def check_dashboard(out: Path) -> None:
    try:
        dash = json.loads(DASHBOARD.read_text())
    except json.JSONDecodeError as e:
        raise Failed(f"{shown(DASHBOARD)} is not JSON: {e}") from e
    problems = []
    for key in ("title", "uid", "schemaVersion", "panels"):
        if key not in dash:
            problems.append(f"no {key!r}")
    variables = {v["name"] for v in dash.get("templating", {}).get("list", [])}
    ids, cells = set(), {}
    for p in dash["panels"]:
        if p["id"] in ids:
            problems.append(f"panel id {p['id']} is used twice")
        ids.add(p["id"])
        g = p["gridPos"]
        if g["x"] < 0 or g["x"] + g["w"] > 24:
            problems.append(f"panel {p['id']} does not fit the 24 columns")
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        overlapped = sorted({cells[c] for c in area if c in cells})
        if overlapped:
            problems.append(f"panel {p['id']} overlaps panels {overlapped}")
        cells.update(dict.fromkeys(area, p["id"]))
        if p["type"] != "row":
            if p.get("datasource", {}).get("uid") != "${datasource}":
                problems.append(f"panel {p['id']} does not use the $datasource variable")
            refs = [t.get("refId") for t in p.get("targets", [])]
            if not refs or len(set(refs)) != len(refs) or not all(t.get("expr") for t in p["targets"]):
                problems.append(f"panel {p['id']} has no targets, a target without expr, or a refId twice")
    queries = dashboard_queries(dash)
    for where, expr in queries:
        for used in re.findall(r"\$(\w+)", expr):
            if not used.startswith("__") and used not in variables:
                problems.append(f"{where} uses ${used}, which is not a dashboard variable")
    require(problems, shown(DASHBOARD))
    # promtool check rules parses every expression, so the queries get a real PromQL parser.
    rules = [{"record": f"dashboard:query_{i}", "expr": as_promql(e)} for i, (_, e) in enumerate(queries)]
    out.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, sort_keys=False))
    panels = sum(1 for p in dash["panels"] if p["type"] != "row")
    say(f"dashboard: {shown(DASHBOARD)} is JSON, {panels} panels, no overlaps, "
        f"{len(queries)} queries (PromQL parsed by promtool next)")


# --- kubernetes --------------------------------------------------------------------------------


def manifests() -> dict[str, dict]:
    """Every resource under ops/kubernetes (examples/ too), by kind."""
    found = {}
    for path in sorted(K8S.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found[doc["kind"]] = doc
    return found


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def dockerfile_user() -> str:
    users = re.findall(r"^USER\s+(\S+)", DOCKERFILE.read_text(), re.M)
    return users[-1] if users else "root"


def wiring_problems(k: dict[str, dict]) -> list[str]:
    """Selectors, ports and probes: the Service, ServiceMonitor and PodDisruptionBudget reach
    the pods, and everything points at dispatcher.listen's port."""
    dep, svc, mon, pdb = (k[x] for x in ("Deployment", "Service", "ServiceMonitor", "PodDisruptionBudget"))
    pod = dep["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    config = tomllib.loads(k["ConfigMap"]["data"]["dispatcher.toml"])["dispatcher"]
    listen_port = int(config["listen"].rsplit(":", 1)[1])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    service_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    problems = []
    if dep["spec"]["replicas"] < 2:
        problems.append("the Deployment has fewer than 2 replicas: nobody stands by")
    for what, selector in (("the Deployment's selector", dep["spec"]["selector"]),
                           ("the PodDisruptionBudget", pdb["spec"]["selector"]),
                           ("the Service", {"matchLabels": svc["spec"]["selector"]})):
        if not selects(selector, pod["metadata"]["labels"]):
            problems.append(f"{what} does not select the pods")
    if not selects(mon["spec"]["selector"], svc["metadata"]["labels"]):
        problems.append("the ServiceMonitor does not select the Service")
    for e in mon["spec"]["endpoints"]:
        if e["port"] not in service_ports:
            problems.append(f"the ServiceMonitor scrapes port {e['port']!r}, which the Service does not name")
        if e.get("path", "/metrics") != "/metrics":
            problems.append("the ServiceMonitor does not scrape /metrics")
    for p in service_ports.values():
        if ports.get(p["targetPort"], p["targetPort"]) != listen_port:
            problems.append(f"the Service targets {p['targetPort']!r}, not dispatcher.listen's port {listen_port}")
    if listen_port not in ports.values():
        problems.append(f"dispatcher.listen's port {listen_port} is not a container port {ports}")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container.get(probe, {}).get("httpGet", {})
        if get.get("path") != path or ports.get(get.get("port"), get.get("port")) != listen_port:
            problems.append(f"{probe} is not GET {path} on dispatcher.listen's port {listen_port}")
    grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
    if grace <= seconds(config["shutdown_grace"]):
        problems.append(f"terminationGracePeriodSeconds {grace} is not above shutdown_grace {config['shutdown_grace']}")
    return problems


def pod_problems(k: dict[str, dict]) -> list[str]:
    """The pod's user, sandbox and resources; the config mounted where OUTBOX_CONFIG says."""
    pod = k["Deployment"]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    sc, psc = container.get("securityContext", {}), pod["spec"].get("securityContext", {})
    problems = []
    if not (sc.get("readOnlyRootFilesystem") and sc.get("allowPrivilegeEscalation") is False
            and "ALL" in sc.get("capabilities", {}).get("drop", [])
            and (sc.get("runAsNonRoot") or psc.get("runAsNonRoot"))):
        problems.append("the container is not non-root, read-only, without privilege escalation and capabilities")
    if str(psc.get("runAsUser")) != dockerfile_user().split(":")[0]:
        problems.append(f"runAsUser {psc.get('runAsUser')} is not the Dockerfile's USER {dockerfile_user()}")
    res = container.get("resources", {})
    if not (res.get("requests", {}).get("memory") and res.get("limits", {}).get("memory")):
        problems.append("no memory request and limit")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounted = [f"{m['mountPath']}/{i['path']}" for m in container["volumeMounts"]
               if volumes[m["name"]].get("configMap", {}).get("name") == k["ConfigMap"]["metadata"]["name"]
               for i in volumes[m["name"]]["configMap"]["items"] if i["key"] == "dispatcher.toml"]
    config_env = [e.get("value") for e in container["env"] if e["name"] == "OUTBOX_CONFIG"]
    if not config_env or config_env[0] not in mounted:
        problems.append(f"OUTBOX_CONFIG {config_env} is not where the ConfigMap is mounted ({mounted})")
    return problems


def deployment_env(k: dict[str, dict], problems: list[str]) -> tuple[dict[str, str], list[str]]:
    """The container's environment, secrets taken from examples/secret.yaml; and the secrets."""
    (container,) = k["Deployment"]["spec"]["template"]["spec"]["containers"]
    secret = k["Secret"]
    env, secrets = {}, []
    for e in container["env"]:
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if not ref:
            env[e["name"]] = e["value"]
        elif ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]:
            env[e["name"]] = secret["stringData"][ref["key"]]
            secrets.append(env[e["name"]])
        else:
            problems.append(f"{e['name']} reads {ref['name']}/{ref['key']}, which examples/secret.yaml does not have")
    return env, secrets


def check_kubernetes(dispatcher: Path) -> None:
    k = manifests()
    kinds = ("ConfigMap", "Deployment", "PodDisruptionBudget", "Service", "ServiceMonitor", "Secret")
    require([f"no {kind}" for kind in kinds if kind not in k], "kubernetes manifests")
    problems = wiring_problems(k) + pod_problems(k)
    env, secrets = deployment_env(k, problems)
    require(problems, "kubernetes manifests")
    # The ConfigMap's TOML through the dispatcher's own loader, with exactly the Deployment's
    # variables (the Secret's values from examples/secret.yaml): every ${NAME} must be set.
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dispatcher.toml"
        path.write_text(k["ConfigMap"]["data"]["dispatcher.toml"])
        run = subprocess.run([str(dispatcher), "check-config", "--config", str(path)],
                             env=env, capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        raise Failed(f"check-config refused the ConfigMap's dispatcher.toml:\n{run.stdout}{run.stderr}")
    if any(v in run.stdout for v in secrets):
        raise Failed("check-config printed a secret value of the ConfigMap's config")
    say(f"kubernetes: selectors, ports, probes, config mount, secrets and user agree; the ConfigMap's "
        f"config passes `outbox-dispatcher check-config` with only the Deployment's {len(env)} variables")


# --- systemd -----------------------------------------------------------------------------------


def check_systemd() -> None:
    unit = dict(re.findall(r"^(\w+)=(.*)$", UNIT.read_text(), re.M))
    default = tomllib.loads((ROOT / "dispatcher" / "config.default.toml").read_text())
    grace = seconds(default["dispatcher"]["shutdown_grace"])
    stop = seconds(unit.get("TimeoutStopSec", "90s"))
    problems = []
    if unit.get("KillSignal") != "SIGTERM":
        problems.append("KillSignal is not SIGTERM")
    if not grace < stop <= grace + 60:
        problems.append(f"TimeoutStopSec {stop:g}s is not a bit above the default shutdown_grace {grace:g}s")
    if unit.get("ExecStart", "").split()[0] != "/usr/local/bin/outbox-dispatcher":
        problems.append("ExecStart is not /usr/local/bin/outbox-dispatcher (the path the check installs it at)")
    require(problems, shown(UNIT))
    say(f"systemd: TimeoutStopSec {stop:g}s is above the default shutdown_grace {grace:g}s")


# --- dockerfile --------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def workspace_bins() -> dict[str, str]:
    """Every binary of the workspace: its name -> its package."""
    bins = {}
    for member in workspace()["workspace"]["members"]:
        manifest = tomllib.loads((ROOT / member / "Cargo.toml").read_text())
        name = manifest["package"]["name"]
        for b in manifest.get("bin", []):
            bins[b["name"]] = name
        if not manifest.get("bin") and (ROOT / member / "src" / "main.rs").exists():
            bins[name] = name
    return bins


def doctest_only_spans(text: str) -> list[tuple[int, int]]:
    """The spans of items under `#[cfg(doctest)]` (a module or a struct, to its closing brace or
    semicolon): only `cargo test --doc` compiles them, never the image's release build."""
    spans = []
    for m in re.finditer(r"#\[cfg\(doctest\)\]", text):
        depth, i = 0, m.end()
        while i < len(text):
            c = text[i]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            elif c == ";" and depth == 0:
                break
            i += 1
        spans.append((m.start(), i))
    return spans


def compile_time_includes(member: str) -> list[tuple[Path, Path]]:
    """(source file, included path) for every include_str!/include_bytes! under a member that a
    build compiles (not those under `#[cfg(doctest)]`); for concat!(...) the first literal, a
    directory prefix."""
    found = []
    for rs in (ROOT / member).rglob("*.rs"):
        text = rs.read_text()
        doctest_only = doctest_only_spans(text)
        for m in re.finditer(r'include_(?:str|bytes)!\(\s*(?:concat!\(\s*)?"([^"]+)"', text):
            if any(a <= m.start() <= b for a, b in doctest_only):
                continue
            found.append((rs, (rs.parent / m[1]).resolve()))
    return found


def check_dockerfile(bindir: Path) -> None:
    steps = dockerfile_instructions()
    problems, copied, stage, workdir, built, rust = [], [], None, {}, [], None
    for word, rest in steps:
        if word == "ARG" and rest.startswith("RUST_VERSION="):
            rust = rest.split("=", 1)[1]
        elif word == "FROM":
            parts = rest.split()
            stage = parts[2] if len(parts) > 2 and parts[1].upper() == "AS" else None
        elif word == "WORKDIR":
            workdir[stage] = rest
        elif word == "RUN" and "cargo build" in rest:
            built = re.findall(r"-p\s+(\S+)", rest)
            if "--release" not in rest or "--locked" not in rest:
                problems.append("the cargo build is not --release --locked")
        elif word == "COPY":
            args = shlex.split(rest)
            paths = [a for a in args if not a.startswith("--")]
            sources, dest = paths[:-1], paths[-1]
            if any(a.startswith("--from=") for a in args):  # build output
                for src in sources:
                    prefix = f"{workdir.get('builder', '')}/target/release/"
                    binary = src.removeprefix(prefix)
                    if not src.startswith(prefix) or binary not in workspace_bins():
                        problems.append(f"COPY {src}: not a workspace binary under {prefix}")
                    elif workspace_bins()[binary] not in built:
                        problems.append(f"COPY {src}: its package is not built by the cargo build line")
                    elif not (bindir / binary).is_file():
                        problems.append(f"COPY {src}: {bindir / binary} was not built here")
                    copied.append(("binary", binary, dest))
            else:
                for src in sources:
                    if not (ROOT / src).exists():
                        problems.append(f"COPY {src}: no such path in the repository")
                    copied.append(("source", src, dest))
    sources = {Path(src) for kind, src, _ in copied if kind == "source"}
    inside = lambda p: any(p == ROOT / s or (ROOT / s) in p.parents for s in sources)  # noqa: E731
    ws = workspace()["workspace"]
    for needed in ["Cargo.toml", "Cargo.lock", *ws["members"]]:
        if Path(needed) not in sources:
            problems.append(f"{needed} is not copied into the builder")
    for member in ws["members"]:
        for rs, target in compile_time_includes(member):
            if not inside(target) or not target.exists():
                problems.append(f"{rs.relative_to(ROOT)} includes {target}, which the image's build would not have")
    if rust is None or tuple(map(int, rust.split("."))) < tuple(map(int, ws["package"]["rust-version"].split("."))):
        problems.append(f"RUST_VERSION {rust} is older than the workspace's rust-version {ws['package']['rust-version']}")
    binaries = [b for kind, b, _ in copied if kind == "binary"]
    if sorted(binaries) != ["outbox-dispatcher", "outboxctl"]:
        problems.append(f"the image gets {binaries}, not outbox-dispatcher and outboxctl")
    entry = [r for w, r in steps if w == "ENTRYPOINT"]
    if entry != ['["/usr/local/bin/outbox-dispatcher"]']:
        problems.append(f"ENTRYPOINT {entry} is not the dispatcher")
    if dockerfile_user().split(":")[0] in ("0", "root"):
        problems.append("the image runs as root")
    require(problems, shown(DOCKERFILE))
    say(f"Dockerfile: {len(sources)} copied paths exist, every workspace member and compile-time include "
        f"is among them; it ships {' and '.join(sorted(binaries))} (workspace binaries, built in {bindir}) "
        f"as user {dockerfile_user()}; not built here")


# --- runbook -----------------------------------------------------------------------------------


def outboxctl_lines(markdown: str) -> list[str]:
    """Every outboxctl command line: in code blocks, and in `inline code`."""
    lines, prose, block = [], [], False
    for line in markdown.splitlines():
        if line.strip().startswith("```"):
            block = not block
        else:
            (lines if block else prose).append(line)
    lines += re.findall(r"`([^`]*outboxctl [^`]*)`", "\n".join(prose))
    commands = []
    for line in lines:
        line = line.split(" #", 1)[0].rstrip("\\ ")
        if "outboxctl" in line:
            commands.append(line[line.index("outboxctl"):])
    return commands


def check_runbook(outboxctl: Path) -> None:
    helps: dict[tuple, str] = {}

    def help_of(path: tuple) -> str:
        if path not in helps:
            run = subprocess.run([str(outboxctl), *path, "--help"], capture_output=True, text=True,
                                 env={"PATH": "/usr/bin:/bin"}, timeout=30)
            helps[path] = run.stdout if run.returncode == 0 else ""
        return helps[path]

    def subcommands(text: str) -> set[str]:
        section = text.split("Commands:", 1)[1].split("Options:", 1)[0] if "Commands:" in text else ""
        return set(re.findall(r"^  (\w[\w-]*)", section, re.M))

    problems, checked = [], 0
    for doc in (RUNBOOK, OPS / "README.md"):
        for command in outboxctl_lines(doc.read_text()):
            words = shlex.split(command.replace("...", "x"))[1:]
            path: tuple = ()
            while words and words[0] in subcommands(help_of(path)):
                path, words = (*path, words[0]), words[1:]
            flags = [w.split("=", 1)[0] for w in words if w.startswith("--")]
            if not path and not flags:
                problems.append(f"{doc.name}: `{command}` names no outboxctl command")
                continue
            text = help_of(path)
            for flag in flags:
                if not re.search(rf"(^|\s){re.escape(flag)}\b", text):
                    problems.append(f"{doc.name}: `{command}`: outboxctl {' '.join(path)} has no {flag}")
            checked += 1
    require(problems, "outboxctl commands in the docs")
    say(f"runbook: {checked} outboxctl commands in RUNBOOK.md and README.md use existing subcommands and flags")


# --- metrics -----------------------------------------------------------------------------------


def used_metrics() -> dict[str, set[str]]:
    """Metric name -> where it is used: the rules, their tests' input series, the dashboard."""
    used: dict[str, set[str]] = {}
    for a in alerts():
        for name in METRIC.findall(a["expr"]):
            used.setdefault(name, set()).add("rules")
    for group in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for s in group.get("input_series", []):
            for name in METRIC.findall(s["series"].split("{")[0]):
                used.setdefault(name, set()).add("rule tests")
    for _, expr in dashboard_queries(json.loads(DASHBOARD.read_text())):
        for name in METRIC.findall(expr):
            used.setdefault(name, set()).add("dashboard")
    return used


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exported(text: str) -> set[str]:
    return {m[1] for m in re.finditer(r"^([a-zA-Z_:][\w:]*)[{ ]", text, re.M)}


def scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.read().decode()
    except OSError:
        return None


def check_metrics(dispatcher: Path) -> None:
    used = used_metrics()
    with tempfile.TemporaryDirectory(prefix="ops-check-") as tmp:
        port = free_port()
        config = Path(tmp) / "dispatcher.toml"
        config.write_text(
            f'[database]\nurl = "sqlite://{tmp}/outbox.db"\n\n'
            f'[dispatcher]\npartitions = 2\nlisten = "127.0.0.1:{port}"\n\n'
            # Nothing is enqueued, so nothing is sent; port 9 (discard) would refuse anyway.
            '[destinations.statements]\nbase_url = "http://127.0.0.1:9"\n')
        log = open(Path(tmp) / "dispatcher.log", "w+")
        proc = subprocess.Popen([str(dispatcher), "--config", str(config)], stdout=log,
                                stderr=subprocess.STDOUT, env={"RUST_LOG": "warn"})
        try:
            # Until every name is there, or 20 s: some gauges are set by the first loop turns.
            deadline, names = time.monotonic() + 20, set()
            while time.monotonic() < deadline and proc.poll() is None:
                text = scrape(f"http://127.0.0.1:{port}/metrics")
                if text is not None:
                    names = exported(text)
                    if set(used) <= names:
                        break
                time.sleep(0.2)
            started = proc.poll() is None
        finally:
            proc.terminate()  # SIGTERM, as systemd and Kubernetes stop it
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = "killed after 30s"
        if not started or not names:
            log.seek(0)
            raise Failed(f"the dispatcher did not serve /metrics on 127.0.0.1:{port}:\n{log.read()[-3000:]}")
    missing = sorted(set(used) - names)
    if missing:
        raise Failed("metrics named in ops/ that a running dispatcher does not export "
                     f"({dispatcher}):\n  " + "\n  ".join(f"{m}  (used in {', '.join(sorted(used[m]))})" for m in missing))
    if code != 0:
        raise Failed(f"the dispatcher did not exit 0 on SIGTERM within 30s (TimeoutStopSec): {code}")
    unused = sorted(n for n in names if n.startswith("outbox_") and n not in used)
    say(f"metrics: all {len(used)} names used by the rules, their tests and the dashboard are exported "
        f"by a running {dispatcher} (it exited 0 on SIGTERM)")
    if unused:
        say(f"metrics: exported but not used in ops/ (fine): {', '.join(unused)}")


def main(argv: list[str]) -> int:
    commands = {
        "rules": lambda: check_rules(),
        "dashboard": lambda: check_dashboard(Path(argv[2])),
        "kubernetes": lambda: check_kubernetes(Path(argv[2])),
        "systemd": lambda: check_systemd(),
        "dockerfile": lambda: check_dockerfile(Path(argv[2])),
        "runbook": lambda: check_runbook(Path(argv[2])),
        "metrics": lambda: check_metrics(Path(argv[2])),
    }
    if len(argv) < 2 or argv[1] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        commands[argv[1]]()
    except Failed as e:
        print(f"ops check: FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
