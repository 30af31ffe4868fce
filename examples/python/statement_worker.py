#!/usr/bin/env python3
"""The seed's statement worker in Python, over fenced-outbox's SQL API (psycopg 3, PostgreSQL).

It takes the lease on statement:account-<account>:<period> with outbox.try_acquire (its own
autocommit statement), builds the statement, then in ONE transaction writes the
account_statements row (fenced by last_accepted_fence, as in the seed) and records the
statement's POST with outbox.enqueue; commits; releases. One line per step on stdout.

Commands:
  run         the story; --fail-after-enqueue, --pause-past-lease and --note change its end
  stale-demo  A acquires with a short TTL and is paused past it, B takes the resource over,
              A's late enqueue is rejected as stale with B's token (exit 3)
  loop        keeps running jobs for --loop-for seconds over accounts 1..--accounts, as the
              Rust example does in the chaos and failover suites: each job takes a lease, works,
              records 1 to --max-ops statement parts under fresh keys; one JSON line per event
              (acquired, busy, enqueue with its outcome, released, error), the same events the
              suites' checker reads from the Rust workers. Database errors are printed and the
              worker carries on with a new connection.

Exit codes: 0 done (a duplicate too), 1 error or --fail-after-enqueue, 2 invalid input (OB005)
or usage, 3 stale owner (OB001), 4 lease expired (OB002), 5 idempotency conflict (OB004),
6 lease busy, 7 no lease (OB003).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
import uuid
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import psycopg

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_INVALID = 2
EXIT_STALE = 3
EXIT_EXPIRED = 4
EXIT_CONFLICT = 5
EXIT_BUSY = 6
EXIT_NO_LEASE = 7

CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS account_statements (
    account             text   NOT NULL,
    period              text   NOT NULL,
    content             bytea  NOT NULL,
    last_accepted_fence bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (account, period)
)"""

# The seed's fenced write: a token lower than the last accepted one changes nothing; an equal
# one is the same owner writing again.
SAVE_STATEMENT = """
INSERT INTO account_statements AS s (account, period, content, last_accepted_fence)
VALUES (%s, %s, %s, %s)
ON CONFLICT (account, period) DO UPDATE
    SET content = EXCLUDED.content, last_accepted_fence = EXCLUDED.last_accepted_fence
    WHERE s.last_accepted_fence <= EXCLUDED.last_accepted_fence
RETURNING last_accepted_fence"""

ENQUEUE = """
SELECT op_id, seq, duplicate FROM outbox.enqueue(
    resource => %s, owner_id => %s::uuid, token => %s::bigint, destination => %s,
    method => 'POST', path => %s, body => %s::bytea, content_type => 'application/json',
    idempotency_key => %s)"""


class Stop(Exception):
    """Ends the worker with `line` on stdout and exit `code`."""

    def __init__(self, code: int, line: str) -> None:
        super().__init__(line)
        self.code = code
        self.line = line


class FailBeforeCommit(Exception):
    """Raised by --fail-after-enqueue inside the transaction."""


@dataclass
class Lease:
    resource: str
    owner_id: uuid.UUID
    token: int
    expires_at: object


class Secrets:
    """Removes the database URL's password from anything printed."""

    def __init__(self, url: str) -> None:
        self.words: list[str] = []
        try:
            password = urlsplit(url).password
        except ValueError:  # not a valid URL (a bad IPv6 host, say): find the user info by hand
            found = re.match(r"^[a-z][a-z0-9+.-]*://[^:@/]*:([^@/]*)@", url, re.IGNORECASE)
            password = found.group(1) if found else None
        if password:
            self.words = sorted({password, unquote(password)}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for word in self.words:
            text = text.replace(word, "***")
        return text


def say(prefix: str, line: str) -> None:
    print(prefix + line, flush=True)


def connect(url: str, secrets: Secrets) -> psycopg.Connection:
    # prepare_threshold=None: no statement is prepared on the server, so the worker also runs
    # through a connection pooler in transaction mode (PgBouncer), where the next transaction
    # may reach another server.
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10, prepare_threshold=None)
    except psycopg.Error as e:
        raise Stop(EXIT_ERROR, "cannot connect: " + secrets.redact(first_line(str(e)))) from None
    conn.add_notice_handler(warn)
    return conn


def report(stop: Stop, prefix: str = "") -> int:
    say(prefix, stop.line)
    return stop.code


def warn(notice: psycopg.errors.Diagnostic) -> None:
    """Shows the database's warnings (e.g. a rejection it could not keep), not its notices."""
    if notice.severity_nonlocalized == "WARNING":
        print(f"database warning: {notice.message_primary}", file=sys.stderr)


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "unknown error"


def ensure_table(conn: psycopg.Connection) -> None:
    # Only when it is missing: a worker whose login holds outbox_producer and rights on the
    # table alone (docs/security.md) may not create tables, not even IF NOT EXISTS.
    if not conn.execute("SELECT to_regclass('account_statements') IS NULL").fetchone()[0]:
        return
    # UniqueViolation: another worker created it at the same moment.
    with contextlib.suppress(psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
        conn.execute(CREATE_TABLE)


def acquire(conn: psycopg.Connection, resource: str, ttl: str, min_ttl: str | None) -> Lease | None:
    # The TTL bound is set for this transaction only (SET LOCAL): a session setting would stay
    # on the server connection, for whichever client a pooler hands it to next.
    with conn.transaction():
        if min_ttl is not None:
            conn.execute("SELECT set_config('outbox.lease_min_ttl', %s, true)", (min_ttl,))
        row = conn.execute(
            "SELECT owner_id, token, expires_at FROM outbox.try_acquire(%s, %s::interval)",
            (resource, ttl),
        ).fetchone()
    return None if row is None else Lease(resource, row[0], row[1], row[2])


def release(conn: psycopg.Connection, lease: Lease, prefix: str, secrets: Secrets) -> None:
    try:
        row = conn.execute(
            "SELECT outbox.release(%s, %s::uuid, %s::bigint)",
            (lease.resource, lease.owner_id, lease.token),
        ).fetchone()
    except psycopg.Error as e:
        say(prefix, f"not released: {secrets.redact(first_line(str(e)))} (the lease expires by itself)")
        return
    if row is not None and row[0]:
        say(prefix, f"released {lease.resource} token {lease.token}")
    else:
        say(prefix, f"not released: {lease.resource} is no longer held by token {lease.token}")


def fnv1a(text: str) -> int:
    h = 2166136261
    for b in text.encode("utf-8"):
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def money(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}"


def build_statement(account: str, period: str, note: str | None) -> tuple[dict, bytes]:
    """The statement's "work": deterministic entries, so a re-run builds the same bytes."""
    seed = fnv1a(f"{account}:{period}") & 0x7FFFFFFF
    entries = []
    for day in (1, 8, 15, 22):
        seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
        entries.append({"date": f"{period}-{day:02d}", "amount_cents": seed % 200000 - 50000})
    statement = {
        "account": account,
        "period": period,
        "entries": entries,
        "closing_balance_cents": sum(e["amount_cents"] for e in entries),
    }
    if note is not None:
        statement["note"] = note
    body = json.dumps(statement, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return statement, body


def wait_past(conn: psycopg.Connection, lease: Lease) -> None:
    """Sleeps until the lease has expired by the database clock (the only clock that decides)."""
    while True:
        (left,) = conn.execute(
            "SELECT extract(epoch FROM %s::timestamptz - clock_timestamp())::float8",
            (lease.expires_at,),
        ).fetchone()
        if left <= 0:
            return
        time.sleep(min(left + 0.02, 1.0))


def record(conn, lease: Lease, args, body: bytes, prefix: str) -> None:
    """The business row and the op in one transaction: both commit, or neither."""
    path = f"/statements/{args.account}/{args.period}"
    key = f"statement-{args.account}-{args.period}"
    with conn.transaction():
        row = conn.execute(SAVE_STATEMENT, (args.account, args.period, body, lease.token)).fetchone()
        if row is None:
            (fence,) = conn.execute(
                "SELECT last_accepted_fence FROM account_statements WHERE account = %s AND period = %s",
                (args.account, args.period),
            ).fetchone()
            raise Stop(
                EXIT_STALE,
                f"stale owner: token {lease.token} rejected by account_statements, "
                f"last accepted fence {fence}; nothing was written",
            )
        say(
            prefix,
            f"wrote account_statements account {args.account} period {args.period} "
            f"last_accepted_fence {lease.token} (uncommitted)",
        )
        op_id, seq, duplicate = conn.execute(
            ENQUEUE,
            (lease.resource, lease.owner_id, lease.token, args.destination, path, sealed(args, body), key),
        ).fetchone()
        say(prefix, f"enqueued op {op_id} seq {seq} duplicate={'true' if duplicate else 'false'}")
        if args.fail_after_enqueue:
            raise FailBeforeCommit()
    say(prefix, "committed")


def sealed(args, body: bytes) -> bytes:
    """The op's body as stored: sealed with --encryption-key (outbox_seal.py), else as it is."""
    return args.key.seal_body(args.destination, body) if args.key else body


def detail_json(error: psycopg.Error) -> dict:
    try:
        value = json.loads(error.diag.message_detail or "")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def explain(error: psycopg.Error, lease: Lease | None, args, secrets: Secrets) -> Stop:
    """The outcome line and exit code for a database error, by SQLSTATE."""
    state = error.sqlstate or ""
    detail = detail_json(error)
    token = lease.token if lease else "?"
    if state == "OB001":
        current = detail.get("current_token", "unknown")
        return Stop(
            EXIT_STALE,
            f"stale owner: token {token} rejected for {args.resource}, current token {current} (OB001): "
            "a newer owner holds the resource; nothing was written, stop this work",
        )
    if state == "OB002":
        return Stop(
            EXIT_EXPIRED,
            f"lease expired: token {token} on {args.resource} expired by the database clock "
            "before the enqueue (OB002); nothing was written, reacquire and start over",
        )
    if state == "OB003":
        return Stop(
            EXIT_NO_LEASE,
            f"no lease: {args.resource} is not held by this owner and token {token} (OB003); "
            "nothing was written",
        )
    if state == "OB004":
        existing = detail.get("existing_op_id", "unknown")
        return Stop(
            EXIT_CONFLICT,
            f"idempotency conflict: key statement-{args.account}-{args.period} of destination "
            f"{args.destination} already belongs to op {existing} with another request (OB004); "
            "nothing was written",
        )
    if state == "OB005":
        field = error.diag.column_name or detail.get("field", "unknown")
        reason = detail.get("reason") or error.diag.message_primary or "refused"
        return Stop(EXIT_INVALID, f"invalid input: {field}: {reason} (OB005); nothing was written")
    if state == "22007":  # the only interval the worker sends is --ttl
        return Stop(EXIT_INVALID, f"invalid input: ttl: {error.diag.message_primary}; nothing was written")
    if state in ("42883", "3F000"):
        return Stop(
            EXIT_ERROR,
            "the outbox SQL API is not in this database: run `outboxctl migrate --database-url ...` first",
        )
    message = error.diag.message_primary or first_line(str(error))
    return Stop(EXIT_ERROR, f"database error {state or '(no SQLSTATE)'}: {secrets.redact(message)}")


def take(conn, args, prefix: str) -> Lease:
    lease = acquire(conn, args.resource, args.ttl, args.min_ttl)
    if lease is None:
        raise Stop(EXIT_BUSY, f"busy: {args.resource} is held by another owner; try again later")
    say(prefix, f"acquired {lease.resource} token {lease.token} owner {lease.owner_id} ttl {args.ttl}")
    return lease


def build(args, prefix: str) -> bytes:
    statement, body = build_statement(args.account, args.period, args.note)
    say(
        prefix,
        f"built statement account {args.account} period {args.period}: {len(statement['entries'])} entries, "
        f"closing balance {money(statement['closing_balance_cents'])} ({len(body)} bytes)",
    )
    return body


def run(args, secrets: Secrets) -> int:
    conn = connect(args.database_url, secrets)
    lease = None
    try:
        info = conn.info
        say("", f"connected to {info.user}@{info.host}:{info.port}/{info.dbname}")
        ensure_table(conn)
        lease = take(conn, args, "")
        body = build(args, "")
        if args.pause_past_lease:
            say("", "pausing past the lease (as a GC pause or a suspended host would)")
            wait_past(conn, lease)
        try:
            record(conn, lease, args, body, "")
        except FailBeforeCommit:
            raise Stop(
                EXIT_ERROR,
                "failed before commit (--fail-after-enqueue): rolled back, "
                "neither the statement nor the op was kept",
            ) from None
        return EXIT_OK
    except psycopg.Error as e:
        return report(explain(e, lease, args, secrets))
    except Stop as stop:
        return report(stop)
    finally:
        if lease is not None and not conn.closed:
            release(conn, lease, "", secrets)
        conn.close()


def stale_demo(args, secrets: Secrets) -> int:
    a_conn = connect(args.database_url, secrets)
    b_conn = connect(args.database_url, secrets)
    a = b = None
    try:
        ensure_table(a_conn)
        a = take(a_conn, args, "A ")
        body = build(args, "A ")
        say("A ", f"pauses past its lease (token {a.token})")
        wait_past(a_conn, a)
        deadline = time.monotonic() + 30
        while b is None:
            b = acquire(b_conn, args.resource, args.ttl, args.min_ttl)
            if b is None:
                if time.monotonic() > deadline:
                    raise Stop(EXIT_ERROR, f"B could not take {args.resource} over within 30 s")
                time.sleep(0.05)
        say("B ", f"acquired {b.resource} token {b.token} owner {b.owner_id} ttl {args.ttl}")
        say("A ", f"resumes and records its statement with token {a.token}")
        try:
            record(a_conn, a, args, body, "A ")
        except psycopg.Error as e:
            return report(explain(e, a, args, secrets), "A ")
        except Stop as stop:
            return report(stop, "A ")
        return report(Stop(EXIT_ERROR, "A's enqueue with an old token was accepted: the fence did not hold"))
    except psycopg.Error as e:
        return report(explain(e, a, args, secrets))
    except Stop as stop:
        return report(stop)
    finally:
        for prefix, conn, lease in (("A ", a_conn, a), ("B ", b_conn, b)):
            if lease is not None and not conn.closed:
                release(conn, lease, prefix, secrets)
            conn.close()


def loop_event(**fields) -> None:
    print(json.dumps(fields, separators=(",", ":")), flush=True)


def enqueue_outcome(error: psycopg.Error, secrets: Secrets) -> dict:
    """An enqueue's refusal as the checker reads it; anything else leaves the commit unknown."""
    detail = detail_json(error)
    state = error.sqlstate or ""
    if state == "OB001":
        return {"outcome": "stale", "current_token": detail.get("current_token")}
    if state == "OB002":
        return {"outcome": "expired"}
    if state == "OB003":
        return {"outcome": "no_lease"}
    message = secrets.redact(first_line(str(error)))
    return {"outcome": "error", "error": f"{state or 'no SQLSTATE'}: {message}"}


def loop_job(conn, args, account: int, rnd, round_no: int, secrets: Secrets) -> None:
    """One job of the loop: a lease, its parts recorded one by one, a release."""
    resource = f"statement:account-{account}:{args.period}"
    ttl_ms = rnd.randint(args.ttl_ms, max(args.ttl_ms, args.ttl_max_ms))
    lease = acquire(conn, resource, f"{ttl_ms} milliseconds", args.min_ttl)
    if lease is None:
        loop_event(event="busy", resource=resource)
        return
    loop_event(event="acquired", resource=resource, token=lease.token, owner_id=str(lease.owner_id))
    parts = rnd.randint(1, args.max_ops)
    for part in range(parts):
        time.sleep(args.work_ms / 1000 * (0.5 + rnd.random() / 2))
        key = f"statement-{account}-{args.period}-{args.name}-{round_no}-{part}"
        body = json.dumps(
            {"account": account, "month": args.period, "part": part, "by": args.name},
            separators=(",", ":"),
        ).encode()
        try:
            with conn.transaction():
                op_id, seq, duplicate = conn.execute(
                    ENQUEUE,
                    (resource, lease.owner_id, lease.token, args.destination, "/v1/statements",
                     sealed(args, body), key),
                ).fetchone()
            result = {"outcome": "duplicate" if duplicate else "accepted", "op_id": str(op_id), "seq": seq}
        except psycopg.Error as e:
            result = enqueue_outcome(e, secrets)
        loop_event(event="enqueue", resource=resource, token=lease.token, key=key, batch=False, result=result)
        if result["outcome"] not in ("accepted", "duplicate"):
            if result["outcome"] == "error":
                raise Reconnect()
            break
    row = conn.execute(
        "SELECT outbox.release(%s, %s::uuid, %s::bigint)", (resource, lease.owner_id, lease.token)
    ).fetchone()
    loop_event(event="released", resource=resource, token=lease.token, released=bool(row and row[0]))


class Reconnect(Exception):
    """The connection failed: the loop opens a new one."""


def run_loop(args, secrets: Secrets) -> int:
    """Jobs over accounts 1..=--accounts until --loop-for has passed; database errors are
    printed as events and the loop carries on with a new connection."""
    import random

    rnd = random.Random(args.seed)
    until = time.monotonic() + args.loop_for
    account = rnd.randint(1, args.accounts)
    conn = None
    round_no = 0
    while time.monotonic() < until:
        try:
            if conn is None or conn.closed or conn.broken:
                conn = psycopg.connect(
                    args.database_url, autocommit=True, connect_timeout=5, prepare_threshold=None
                )
            loop_job(conn, args, account, rnd, round_no, secrets)
        except (psycopg.Error, Reconnect) as e:
            # A Reconnect follows an enqueue error whose own line said why.
            if isinstance(e, psycopg.Error):
                message = secrets.redact(first_line(str(e)))
                # By SQLSTATE, as the enqueue outcomes are: 53xxx out of disk or connections,
                # 08xxx the connection, 57Pxx the server shutting down.
                loop_event(event="error", account=account, error=f"{e.sqlstate}: {message}" if e.sqlstate else message)
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.2)
        round_no += 1
        account = account % args.accounts + 1
        time.sleep(rnd.random() / 20)
    if conn is not None:
        conn.close()
    loop_event(event="finished", rounds=round_no)
    return EXIT_OK


def milliseconds(text: str) -> int:
    """A duration like 300ms, 2s or 1.5s, in whole milliseconds."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", text.strip())
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 300ms or 2s")
    value = float(found.group(1)) * (1 if found.group(2) == "ms" else 1000)
    return int(value)


def load_key(spec: str):
    """--encryption-key: imported only then, so the worker runs without `cryptography` too."""
    import outbox_seal

    try:
        return outbox_seal.Key.load(spec)
    except (OSError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parse_args(argv: list[str]):
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL"),
        help="postgres://... (default: $DATABASE_URL)",
    )
    common.add_argument("--account", default="1842", help="the account (default 1842)")
    common.add_argument("--period", default="2026-07", help="the statement's month (default 2026-07)")
    common.add_argument(
        "--destination",
        default="statements",
        help="the destination's name in the dispatcher's config (default statements)",
    )
    common.add_argument(
        "--ttl", default=None, help="lease time to live, a PostgreSQL interval (default 30s; stale-demo 1s)"
    )
    common.add_argument(
        "--min-ttl",
        default=None,
        help="set outbox.lease_min_ttl for each acquisition (default 5s; stale-demo 1s)",
    )
    common.add_argument(
        "--note",
        default=None,
        help="add a note to the statement: another body under the same idempotency key",
    )
    common.add_argument(
        "--encryption-key",
        dest="key",
        default=None,
        type=load_key,
        metavar="ID=SOURCE",
        help="encrypt the op's body at rest with this key (file:/path or env:NAME; "
        "outbox_seal.py; the dispatcher needs it too)",
    )
    common.add_argument(
        "--fail-after-enqueue",
        action="store_true",
        help="raise after the enqueue, before commit: the transaction rolls back",
    )
    common.add_argument(
        "--pause-past-lease",
        action="store_true",
        help="after building, wait until the lease expired by the database clock",
    )
    parser = argparse.ArgumentParser(
        prog="statement_worker.py",
        description="The seed's statement worker over fenced-outbox's SQL API.",
        epilog="exit codes: 0 done, 1 error, 2 invalid input, 3 stale, 4 expired, 5 conflict, "
        "6 busy, 7 no lease",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", parents=[common], help="the statement story")
    commands.add_parser("stale-demo", parents=[common], help="a stale owner's enqueue is rejected")
    looping = commands.add_parser("loop", parents=[common], help="jobs over several accounts, JSON lines")
    looping.add_argument("--loop-for", type=float, required=True, help="seconds to keep running jobs")
    looping.add_argument("--accounts", type=int, default=4, help="accounts 1..N are the resources (default 4)")
    looping.add_argument("--max-ops", type=int, default=3, help="most statement parts per job (default 3)")
    looping.add_argument("--ttl-min", dest="ttl_ms", type=milliseconds, default=1000, help="shortest lease (1s)")
    looping.add_argument("--ttl-max", dest="ttl_max_ms", type=milliseconds, default=2000, help="longest lease (2s)")
    looping.add_argument("--work", dest="work_ms", type=milliseconds, default=300, help="work per part, at most (300ms)")
    looping.add_argument("--name", default="py", help="this worker's name, part of every key (default py)")
    looping.add_argument("--seed", type=int, default=1, help="seeds its choices (default 1)")
    args = parser.parse_args(argv)
    if not args.database_url:
        parser.error("set DATABASE_URL or pass --database-url")
    if args.command == "loop":
        if args.accounts < 1 or args.max_ops < 1 or args.loop_for <= 0:
            parser.error("--accounts, --max-ops and --loop-for must be positive")
        if args.min_ttl is None:
            args.min_ttl = "1s"
    short = args.command == "stale-demo"
    args.ttl = args.ttl or ("1s" if short else "30s")
    if args.min_ttl is None and short:
        args.min_ttl = "1s"
    args.resource = f"statement:account-{args.account}:{args.period}"
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    secrets = Secrets(args.database_url)
    try:
        if args.command == "loop":
            return run_loop(args, secrets)
        return stale_demo(args, secrets) if args.command == "stale-demo" else run(args, secrets)
    except Stop as stop:
        return report(stop)
    except KeyboardInterrupt:
        print("interrupted: nothing after the last committed step was kept", file=sys.stderr)
        return 130
    except Exception as e:  # the last resort: a clear line, never a traceback
        print(f"error: {secrets.redact(type(e).__name__ + ': ' + first_line(str(e)))}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
