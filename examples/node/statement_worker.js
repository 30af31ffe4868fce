#!/usr/bin/env node
// The seed's statement worker in Node.js, over fenced-outbox's SQL API (node-postgres).
//
// It takes the lease on statement:account-<account>:<period> with outbox.try_acquire (its own
// autocommit statement), builds the statement, then in ONE transaction writes the
// account_statements row (fenced by last_accepted_fence, as in the seed) and records the
// statement's POST with outbox.enqueue; commits; releases. One line per step on stdout. The
// commands, options, lines and exit codes are those of ../python/statement_worker.py.
//
// Commands:
//   run         the story; --fail-after-enqueue, --pause-past-lease and --note change its end
//   stale-demo  A acquires with a short TTL and is paused past it, B takes the resource over,
//               A's late enqueue is rejected as stale with B's token (exit 3)
//
// Exit codes: 0 done (a duplicate too), 1 error or --fail-after-enqueue, 2 invalid input (OB005)
// or usage, 3 stale owner (OB001), 4 lease expired (OB002), 5 idempotency conflict (OB004),
// 6 lease busy, 7 no lease (OB003).

'use strict';

const { parseArgs } = require('node:util');
const { Client } = require('pg');

const EXIT = { ok: 0, error: 1, invalid: 2, stale: 3, expired: 4, conflict: 5, busy: 6, noLease: 7 };

const CREATE_TABLE = `
CREATE TABLE IF NOT EXISTS account_statements (
    account             text   NOT NULL,
    period              text   NOT NULL,
    content             bytea  NOT NULL,
    last_accepted_fence bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (account, period)
)`;

// The seed's fenced write: a token lower than the last accepted one changes nothing; an equal
// one is the same owner writing again.
const SAVE_STATEMENT = `
INSERT INTO account_statements AS s (account, period, content, last_accepted_fence)
VALUES ($1, $2, $3::bytea, $4::bigint)
ON CONFLICT (account, period) DO UPDATE
    SET content = EXCLUDED.content, last_accepted_fence = EXCLUDED.last_accepted_fence
    WHERE s.last_accepted_fence <= EXCLUDED.last_accepted_fence
RETURNING last_accepted_fence`;

const ENQUEUE = `
SELECT op_id, seq, duplicate FROM outbox.enqueue(
    resource => $1, owner_id => $2::uuid, token => $3::bigint, destination => $4,
    method => 'POST', path => $5, body => $6::bytea, content_type => 'application/json',
    idempotency_key => $7)`;

/** Ends the worker with `line` on stdout and exit `code`. */
class Stop extends Error {
  constructor(code, line) {
    super(line);
    this.code = code;
    this.line = line;
  }
}

/** Thrown by --fail-after-enqueue inside the transaction. */
class FailBeforeCommit extends Error {}

/** Removes the database URL's password from anything printed. */
class Secrets {
  constructor(url) {
    let password = '';
    try {
      password = new URL(url).password;
    } catch {
      // not a valid URL (a bad port, say): find the user info by hand
      password = /^[a-z][a-z0-9+.-]*:\/\/[^:@/]*:([^@/]*)@/i.exec(url)?.[1] ?? '';
    }
    this.words = password ? [...new Set([password, safeDecode(password)])].sort((a, b) => b.length - a.length) : [];
  }

  redact(text) {
    let out = String(text);
    for (const word of this.words) out = out.split(word).join('***');
    return out;
  }
}

function safeDecode(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

function say(prefix, line) {
  process.stdout.write(`${prefix}${line}\n`);
}

function report(stop, prefix = '') {
  say(prefix, stop.line);
  return stop.code;
}

function firstLine(text) {
  const trimmed = String(text ?? '').trim();
  return trimmed ? trimmed.split('\n')[0] : 'unknown error';
}

/** A SQLSTATE-carrying error from the server (node-postgres sets `code`, `detail`, `column`). */
function isDatabaseError(e) {
  return e instanceof Error && typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code);
}

async function connect(url, secrets) {
  let client;
  try {
    client = new Client({ connectionString: url, connectionTimeoutMillis: 10000 });
  } catch (e) {
    throw new Stop(EXIT.error, `cannot connect: ${secrets.redact(firstLine(e.message))}`);
  }
  // Shows the database's warnings (e.g. a rejection it could not keep), not its notices.
  client.on('notice', (n) => {
    if (n.severity === 'WARNING') process.stderr.write(`database warning: ${n.message}\n`);
  });
  client.on('error', () => {}); // a dropped connection fails the next query instead
  try {
    await client.connect();
  } catch (e) {
    throw new Stop(EXIT.error, `cannot connect: ${secrets.redact(firstLine(e.message))}`);
  }
  return client;
}

async function ensureTable(client) {
  // Only when it is missing: a worker whose login holds outbox_producer and rights on the
  // table alone (docs/security.md) may not create tables, not even IF NOT EXISTS.
  const missing = await client.query("SELECT to_regclass('account_statements') IS NULL AS missing");
  if (!missing.rows[0].missing) return;
  try {
    await client.query(CREATE_TABLE);
  } catch (e) {
    // another worker created it at the same moment
    if (!(isDatabaseError(e) && (e.code === '23505' || e.code === '42P07'))) throw e;
  }
}

async function acquire(client, resource, ttl, minTtl) {
  // The TTL bound is set for this transaction only (SET LOCAL): a session setting would stay on
  // the server connection, for whichever client a pooler (PgBouncer) hands it to next.
  await client.query('BEGIN');
  let rows;
  try {
    if (minTtl !== undefined) {
      await client.query("SELECT set_config('outbox.lease_min_ttl', $1, true)", [minTtl]);
    }
    // expires_at as text: a JS Date would drop the microseconds the database clock decides by.
    ({ rows } = await client.query(
      'SELECT owner_id, token, expires_at::text AS expires_at FROM outbox.try_acquire($1, $2::interval)',
      [resource, ttl],
    ));
    await client.query('COMMIT');
  } catch (e) {
    await client.query('ROLLBACK').catch(() => {});
    throw e;
  }
  if (rows.length === 0) return null;
  return { resource, ownerId: rows[0].owner_id, token: rows[0].token, expiresAt: rows[0].expires_at };
}

async function release(client, lease, prefix, secrets) {
  let released;
  try {
    const { rows } = await client.query('SELECT outbox.release($1, $2::uuid, $3::bigint) AS released', [
      lease.resource,
      lease.ownerId,
      lease.token,
    ]);
    released = rows[0].released;
  } catch (e) {
    say(prefix, `not released: ${secrets.redact(firstLine(e.message))} (the lease expires by itself)`);
    return;
  }
  if (released) say(prefix, `released ${lease.resource} token ${lease.token}`);
  else say(prefix, `not released: ${lease.resource} is no longer held by token ${lease.token}`);
}

function fnv1a(text) {
  let h = 2166136261;
  for (const b of Buffer.from(text, 'utf8')) h = Math.imul(h ^ b, 16777619) >>> 0;
  return h;
}

function money(cents) {
  const sign = cents < 0 ? '-' : '';
  const abs = Math.abs(cents);
  return `${sign}${Math.floor(abs / 100)}.${String(abs % 100).padStart(2, '0')}`;
}

/** The statement's "work": deterministic entries, so a re-run builds the same bytes. */
function buildStatement(account, period, note) {
  let seed = fnv1a(`${account}:${period}`) & 0x7fffffff;
  const entries = [];
  for (const day of [1, 8, 15, 22]) {
    seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff;
    const date = `${period}-${String(day).padStart(2, '0')}`;
    entries.push({ date, amount_cents: (seed % 200000) - 50000 });
  }
  const statement = {
    account,
    period,
    entries,
    closing_balance_cents: entries.reduce((sum, e) => sum + e.amount_cents, 0),
  };
  if (note !== undefined) statement.note = note;
  return { statement, body: Buffer.from(JSON.stringify(statement), 'utf8') };
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Sleeps until the lease has expired by the database clock (the only clock that decides). */
async function waitPast(client, lease) {
  for (;;) {
    const { rows } = await client.query(
      'SELECT extract(epoch FROM $1::timestamptz - clock_timestamp())::float8 AS left',
      [lease.expiresAt],
    );
    const left = rows[0].left;
    if (left <= 0) return;
    await sleep(Math.min(left + 0.02, 1.0) * 1000);
  }
}

/** The business row and the op in one transaction: both commit, or neither. */
async function record(client, lease, args, body, prefix) {
  const path = `/statements/${args.account}/${args.period}`;
  const key = `statement-${args.account}-${args.period}`;
  await client.query('BEGIN');
  try {
    const saved = await client.query(SAVE_STATEMENT, [args.account, args.period, body, lease.token]);
    if (saved.rows.length === 0) {
      const { rows } = await client.query(
        'SELECT last_accepted_fence FROM account_statements WHERE account = $1 AND period = $2',
        [args.account, args.period],
      );
      throw new Stop(
        EXIT.stale,
        `stale owner: token ${lease.token} rejected by account_statements, ` +
          `last accepted fence ${rows[0].last_accepted_fence}; nothing was written`,
      );
    }
    say(
      prefix,
      `wrote account_statements account ${args.account} period ${args.period} ` +
        `last_accepted_fence ${lease.token} (uncommitted)`,
    );
    const { rows } = await client.query(ENQUEUE, [
      lease.resource,
      lease.ownerId,
      lease.token,
      args.destination,
      path,
      args.key ? args.key.sealBody(args.destination, body) : body,
      key,
    ]);
    const op = rows[0];
    say(prefix, `enqueued op ${op.op_id} seq ${op.seq} duplicate=${op.duplicate ? 'true' : 'false'}`);
    if (args.failAfterEnqueue) throw new FailBeforeCommit();
    await client.query('COMMIT');
  } catch (e) {
    await client.query('ROLLBACK').catch(() => {});
    throw e;
  }
  say(prefix, 'committed');
}

function detailJson(error) {
  try {
    const value = JSON.parse(error.detail ?? '');
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : {};
  } catch {
    return {};
  }
}

/** The outcome line and exit code for a database error, by SQLSTATE. */
function explain(error, lease, args, secrets) {
  const state = error.code;
  const detail = detailJson(error);
  const token = lease ? lease.token : '?';
  switch (state) {
    case 'OB001':
      return new Stop(
        EXIT.stale,
        `stale owner: token ${token} rejected for ${args.resource}, current token ` +
          `${detail.current_token ?? 'unknown'} (OB001): a newer owner holds the resource; ` +
          'nothing was written, stop this work',
      );
    case 'OB002':
      return new Stop(
        EXIT.expired,
        `lease expired: token ${token} on ${args.resource} expired by the database clock ` +
          'before the enqueue (OB002); nothing was written, reacquire and start over',
      );
    case 'OB003':
      return new Stop(
        EXIT.noLease,
        `no lease: ${args.resource} is not held by this owner and token ${token} (OB003); ` +
          'nothing was written',
      );
    case 'OB004':
      return new Stop(
        EXIT.conflict,
        `idempotency conflict: key statement-${args.account}-${args.period} of destination ` +
          `${args.destination} already belongs to op ${detail.existing_op_id ?? 'unknown'} ` +
          'with another request (OB004); nothing was written',
      );
    case 'OB005': {
      const field = error.column || detail.field || 'unknown';
      const reason = detail.reason || error.message || 'refused';
      return new Stop(EXIT.invalid, `invalid input: ${field}: ${reason} (OB005); nothing was written`);
    }
    case '22007': // the only interval the worker sends is --ttl
      return new Stop(EXIT.invalid, `invalid input: ttl: ${firstLine(error.message)}; nothing was written`);
    case '42883':
    case '3F000':
      return new Stop(
        EXIT.error,
        'the outbox SQL API is not in this database: run `outboxctl migrate --database-url ...` first',
      );
    default:
      return new Stop(EXIT.error, `database error ${state}: ${secrets.redact(firstLine(error.message))}`);
  }
}

async function take(client, args, prefix) {
  const lease = await acquire(client, args.resource, args.ttl, args.minTtl);
  if (lease === null) {
    throw new Stop(EXIT.busy, `busy: ${args.resource} is held by another owner; try again later`);
  }
  say(prefix, `acquired ${lease.resource} token ${lease.token} owner ${lease.ownerId} ttl ${args.ttl}`);
  return lease;
}

function build(args, prefix) {
  const { statement, body } = buildStatement(args.account, args.period, args.note);
  say(
    prefix,
    `built statement account ${args.account} period ${args.period}: ${statement.entries.length} entries, ` +
      `closing balance ${money(statement.closing_balance_cents)} (${body.length} bytes)`,
  );
  return body;
}

async function run(args, secrets) {
  const client = await connect(args.databaseUrl, secrets);
  let lease = null;
  try {
    const p = client.connectionParameters;
    say('', `connected to ${p.user}@${p.host}:${p.port}/${p.database}`);
    await ensureTable(client);
    lease = await take(client, args, '');
    const body = build(args, '');
    if (args.pausePastLease) {
      say('', 'pausing past the lease (as a GC pause or a suspended host would)');
      await waitPast(client, lease);
    }
    try {
      await record(client, lease, args, body, '');
    } catch (e) {
      if (e instanceof FailBeforeCommit) {
        throw new Stop(
          EXIT.error,
          'failed before commit (--fail-after-enqueue): rolled back, ' +
            'neither the statement nor the op was kept',
        );
      }
      throw e;
    }
    return EXIT.ok;
  } catch (e) {
    if (e instanceof Stop) return report(e);
    if (isDatabaseError(e)) return report(explain(e, lease, args, secrets));
    throw e;
  } finally {
    if (lease !== null) await release(client, lease, '', secrets);
    await client.end().catch(() => {});
  }
}

async function staleDemo(args, secrets) {
  const aClient = await connect(args.databaseUrl, secrets);
  let bClient;
  let a = null;
  let b = null;
  try {
    bClient = await connect(args.databaseUrl, secrets);
    await ensureTable(aClient);
    a = await take(aClient, args, 'A ');
    const body = build(args, 'A ');
    say('A ', `pauses past its lease (token ${a.token})`);
    await waitPast(aClient, a);
    const deadline = Date.now() + 30000;
    while (b === null) {
      b = await acquire(bClient, args.resource, args.ttl, args.minTtl);
      if (b === null) {
        if (Date.now() > deadline) {
          throw new Stop(EXIT.error, `B could not take ${args.resource} over within 30 s`);
        }
        await sleep(50);
      }
    }
    say('B ', `acquired ${b.resource} token ${b.token} owner ${b.ownerId} ttl ${args.ttl}`);
    say('A ', `resumes and records its statement with token ${a.token}`);
    try {
      await record(aClient, a, args, body, 'A ');
    } catch (e) {
      if (e instanceof Stop) return report(e, 'A ');
      if (isDatabaseError(e)) return report(explain(e, a, args, secrets), 'A ');
      throw e;
    }
    return report(new Stop(EXIT.error, "A's enqueue with an old token was accepted: the fence did not hold"));
  } catch (e) {
    if (e instanceof Stop) return report(e);
    if (isDatabaseError(e)) return report(explain(e, a, args, secrets));
    throw e;
  } finally {
    if (a !== null) await release(aClient, a, 'A ', secrets);
    if (b !== null) await release(bClient, b, 'B ', secrets);
    await aClient.end().catch(() => {});
    if (bClient) await bClient.end().catch(() => {});
  }
}

const USAGE = `usage: statement_worker.js {run,stale-demo} [options]

The seed's statement worker over fenced-outbox's SQL API.

options:
  --database-url URL     postgres://... (default: $DATABASE_URL)
  --account ID           the account (default 1842)
  --period YYYY-MM       the statement's month (default 2026-07)
  --destination NAME     the destination's name in the dispatcher's config (default statements)
  --ttl INTERVAL         lease time to live, a PostgreSQL interval (default 30s; stale-demo 1s)
  --min-ttl INTERVAL     set outbox.lease_min_ttl for each acquisition (default 5s; stale-demo 1s)
  --note TEXT            add a note to the statement: another body under the same idempotency key
  --encryption-key ID=SOURCE
                         encrypt the op's body at rest with this key (file:/path or env:NAME;
                         outbox_seal.js; the dispatcher needs it too)
  --fail-after-enqueue   raise after the enqueue, before commit: the transaction rolls back
  --pause-past-lease     after building, wait until the lease expired by the database clock

exit codes: 0 done, 1 error, 2 invalid input, 3 stale, 4 expired, 5 conflict, 6 busy, 7 no lease
`;

function usageError(message) {
  process.stderr.write(`${USAGE.split('\n')[0]}\nstatement_worker.js: error: ${message}\n`);
  return null;
}

function parse(argv) {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        'database-url': { type: 'string' },
        account: { type: 'string', default: '1842' },
        period: { type: 'string', default: '2026-07' },
        destination: { type: 'string', default: 'statements' },
        ttl: { type: 'string' },
        'min-ttl': { type: 'string' },
        note: { type: 'string' },
        'encryption-key': { type: 'string' },
        'fail-after-enqueue': { type: 'boolean', default: false },
        'pause-past-lease': { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (e) {
    return usageError(e.message);
  }
  const { values, positionals } = parsed;
  if (values.help) {
    process.stdout.write(USAGE);
    process.exit(EXIT.ok);
  }
  if (positionals.length !== 1 || !['run', 'stale-demo'].includes(positionals[0])) {
    return usageError('give one command: run or stale-demo');
  }
  const command = positionals[0];
  const databaseUrl = values['database-url'] ?? process.env.DATABASE_URL;
  if (!databaseUrl) return usageError('set DATABASE_URL or pass --database-url');
  const short = command === 'stale-demo';
  let key = null;
  if (values['encryption-key'] !== undefined) {
    try {
      key = require('./outbox_seal').Key.load(values['encryption-key']);
    } catch (e) {
      return usageError(`--encryption-key: ${e.message}`);
    }
  }
  return {
    key,
    command,
    databaseUrl,
    account: values.account,
    period: values.period,
    destination: values.destination,
    ttl: values.ttl ?? (short ? '1s' : '30s'),
    minTtl: values['min-ttl'] ?? (short ? '1s' : undefined),
    note: values.note,
    failAfterEnqueue: values['fail-after-enqueue'],
    pausePastLease: values['pause-past-lease'],
    resource: `statement:account-${values.account}:${values.period}`,
  };
}

async function main(argv) {
  const args = parse(argv);
  if (args === null) return EXIT.invalid;
  const secrets = new Secrets(args.databaseUrl);
  process.on('SIGINT', () => {
    process.stderr.write('interrupted: nothing after the last committed step was kept\n');
    process.exit(130);
  });
  try {
    return args.command === 'stale-demo' ? await staleDemo(args, secrets) : await run(args, secrets);
  } catch (e) {
    if (e instanceof Stop) return report(e);
    // the last resort: a clear line, never a stack trace
    const name = e instanceof Error ? e.name : 'Error';
    process.stderr.write(`error: ${secrets.redact(`${name}: ${firstLine(e?.message ?? e)}`)}\n`);
    return EXIT.error;
  }
}

main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
