// The peer of `outbox-bench peer` (issue 36): graphile-worker delivering each job as one HTTP
// POST to the benchmark's sink. The benchmark writes this file next to its own `npm ci` of
// package.json and runs it with the Node 22 that package installs:
//
//   DATABASE_URL=... node worker.mjs migrate
//       installs graphile-worker's schema (runMigrations), then exits;
//   DATABASE_URL=... PEER_CONCURRENCY=64 PEER_SINK_URL=http://127.0.0.1:PORT/v1/statements \
//       node worker.mjs run
//       works jobs of the task `post` until it is killed; exits 1 at the first job that fails.
//       With PEER_COMPLETE_BATCH_DELAY_MS=N it batches its completions and failures
//       (completeJobBatchDelay, failJobBatchDelay = N), off by default as in graphile-worker.
//
// The task `post` sends the job's payload as the JSON body, with the headers a producer's op
// carries in the benchmark (X-Request-Source, Idempotency-Key from the payload's `key`), through
// Node's global fetch: undici's shared agent, which keeps connections to the sink alive and
// opens as many as there are requests in flight, as the dispatcher's reqwest pool does. The
// job is done only when the POST has answered 2xx and its body has been read.
import { Logger, run, runMigrations } from "graphile-worker";

function required(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`worker.mjs: ${name} is not set`);
    process.exit(2);
  }
  return value;
}

// Warnings and errors only, as the dispatcher runs with RUST_LOG=warn: a line per job would be
// measured as the worker's work.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") {
    console.error(`graphile-worker ${level}: ${message}`);
  }
});

const connectionString = required("DATABASE_URL");
const mode = process.argv[2];

if (mode === "migrate") {
  await runMigrations({ connectionString, logger });
} else if (mode === "run") {
  const concurrency = Number.parseInt(required("PEER_CONCURRENCY"), 10);
  if (!(concurrency >= 1)) {
    console.error("worker.mjs: PEER_CONCURRENCY must be a positive integer");
    process.exit(2);
  }
  const url = required("PEER_SINK_URL");
  const batchDelayText = process.env.PEER_COMPLETE_BATCH_DELAY_MS;
  const batchDelay = batchDelayText === undefined ? -1 : Number.parseInt(batchDelayText, 10);
  if (!(batchDelay >= -1)) {
    console.error("worker.mjs: PEER_COMPLETE_BATCH_DELAY_MS must be a whole number of milliseconds");
    process.exit(2);
  }

  async function post(payload) {
    const response = await fetch(url, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-request-source": "bench",
        "idempotency-key": String(payload?.key ?? ""),
      },
      body: JSON.stringify(payload),
      // The dispatcher's destination timeout in the benchmark.
      signal: AbortSignal.timeout(5000),
    });
    // Read to the end, so that the connection goes back to the pool.
    await response.arrayBuffer();
    if (!response.ok) {
      throw new Error(`the sink answered ${response.status}`);
    }
  }

  const runner = await run({
    logger,
    taskList: { post },
    preset: {
      worker: {
        connectionString,
        concurrentJobs: concurrency,
        // What graphile-worker's documentation recommends: concurrency + 2, at least 10.
        maxPoolSize: Math.max(10, concurrency + 2),
        // As the dispatcher's poll in the benchmark; both also wake on LISTEN/NOTIFY.
        pollInterval: 100,
        // On, at the size its release notes recommend: concurrency + 1.
        localQueue: { size: concurrency + 1 },
        // -1 (graphile-worker's default) completes each job by itself.
        completeJobBatchDelay: batchDelay,
        failJobBatchDelay: batchDelay,
      },
    },
  });
  // A failed POST leaves its job for a retry minutes later: stop at once, so the benchmark
  // reports it instead of waiting for a queue that does not empty.
  runner.events.on("job:error", ({ job, error }) => {
    console.error(`worker.mjs: job ${job.id} failed: ${error}`);
    process.exit(1);
  });
  await runner.promise;
} else {
  console.error("usage: node worker.mjs migrate|run (see the comment at the top)");
  process.exit(2);
}
