/**
 * b3) Bytes per delivered message after retention: the `dms` cluster (2 nodes, senders on node 1, receivers
 * on node 2, receivers ack) with a short MESSAGE_RETENTION_MS and RETENTION_INTERVAL_MS, offered a fixed
 * rate of DMs (the open-loop driver of bench/dms.ts) for DURATION. Every SAMPLE: `pg_total_relation_size`
 * (table + indexes + TOAST) of messages, deliveries and delivery_feeds, and the rows of messages and
 * deliveries. At the end: those bytes ÷ the messages delivered in the run. Under steady load the tables
 * should hold one retention window of messages (plus what is owed and what vacuum has not reclaimed yet),
 * so the size stays flat and the bytes per delivered message fall as the run grows. A fresh cluster (and
 * database) per run, so every run starts from empty tables.
 *
 * Retention deletes rows; the space of deleted rows is reclaimed (for reuse) only by VACUUM. When the
 * server's autovacuum is off (as on the CI machine: /etc/postgresql/15/main/conf.d/90-ci.conf), the bench
 * stands in for it with a plain `VACUUM` of the three tables every VACUUM_EVERY (reported as `vacuum`), or
 * with none if VACUUM_EVERY is 0 (then the tables grow by the dead rows even though the live rows are flat).
 */
import pg from 'pg';
import { openLoop, startDmRig } from './dms.js';
import { killAll } from './lib/processes.js';
import { median, round } from './lib/stats.js';

export interface RetentionOptions {
  runs: number;
  durationMs: number;
  rate: number;
  pairs: number;
  messageRetentionMs: number;
  retentionIntervalMs: number;
  sampleMs: number;
  /** The stand-in for autovacuum when the server's is off; 0: none. */
  vacuumEveryMs: number;
}

export interface RetentionSample {
  /** Seconds since the first send. */
  s: number;
  /** messages + deliveries + delivery_feeds, bytes. */
  bytes: number;
  messageRows: number;
  deliveryRows: number;
}

export interface RetentionRun {
  /** Who reclaimed dead rows: the server's autovacuum, the bench's stand-in, or nobody. */
  vacuum: string;
  delivered: number;
  lost: number;
  failed: number;
  finalBytes: number;
  peakBytes: number;
  /** Bytes per table at the end. */
  tables: { messages: number; deliveries: number; deliveryFeeds: number };
  finalMessageRows: number;
  bytesPerDeliveredMessage: number;
  /** Final bytes ÷ the message rows left (one retention window's worth, plus any bloat). */
  bytesPerRetainedMessage: number;
  /** Size at the end ÷ size halfway through the run: about 1 when flat. */
  growthSecondHalf: number;
  /** A dozen samples evenly over the run (the table over time). */
  overTime: RetentionSample[];
  /** Dead tuples and vacuums per table at the end (what bounds the plateau). */
  tableStats: Record<string, { deadRows: number; vacuums: number; autovacuums: number }>;
}

export interface RetentionResult {
  durationS: number;
  rate: number;
  messageRetentionMs: number;
  retentionIntervalMs: number;
  vacuum: string;
  runs: RetentionRun[];
  medianDelivered: number;
  medianFinalBytes: number;
  medianBytesPerDeliveredMessage: number;
  medianGrowthSecondHalf: number;
  /** The median run's samples. */
  overTime: RetentionSample[];
}

const SIZE_QUERY = `SELECT pg_total_relation_size('messages')::bigint AS messages,
       pg_total_relation_size('deliveries')::bigint AS deliveries,
       pg_total_relation_size('delivery_feeds')::bigint AS "deliveryFeeds",
       (SELECT count(*) FROM messages)::bigint AS "messageRows",
       (SELECT count(*) FROM deliveries)::bigint AS "deliveryRows"`;

async function oneRun(options: RetentionOptions): Promise<RetentionRun> {
  const rig = await startDmRig('retention', options.pairs, {
    MESSAGE_RETENTION_MS: String(options.messageRetentionMs),
    RETENTION_INTERVAL_MS: String(options.retentionIntervalMs),
  });
  const db = new pg.Client({ connectionString: rig.cluster.databaseUrl });
  await db.connect();
  const samples: RetentionSample[] = [];
  let tables = { messages: 0, deliveries: 0, deliveryFeeds: 0 };
  const started = Date.now();
  const sample = async () => {
    const row = (await db.query(SIZE_QUERY)).rows[0] as Record<string, string>;
    tables = {
      messages: Number(row.messages),
      deliveries: Number(row.deliveries),
      deliveryFeeds: Number(row.deliveryFeeds),
    };
    samples.push({
      s: round((Date.now() - started) / 1000),
      bytes: tables.messages + tables.deliveries + tables.deliveryFeeds,
      messageRows: Number(row.messageRows),
      deliveryRows: Number(row.deliveryRows),
    });
  };
  const autovacuum = (await db.query<{ on: string }>("SELECT current_setting('autovacuum') AS on")).rows[0]!
    .on;
  const vacuumEveryMs = autovacuum === 'on' ? 0 : options.vacuumEveryMs;
  const vacuum =
    autovacuum === 'on'
      ? 'autovacuum'
      : vacuumEveryMs > 0
        ? `bench VACUUM every ${vacuumEveryMs / 1000} s (autovacuum off)`
        : 'none (autovacuum off)';
  // One connection, so sizes and vacuums take turns; a failed sample is skipped, not fatal.
  let sampling = Promise.resolve();
  const queue = (work: () => Promise<unknown>) => {
    sampling = sampling.then(() =>
      work().then(
        () => {},
        () => {},
      ),
    );
  };
  const sampler = setInterval(() => queue(sample), options.sampleMs);
  const vacuumer =
    vacuumEveryMs > 0
      ? setInterval(() => queue(() => db.query('VACUUM messages, deliveries, delivery_feeds')), vacuumEveryMs)
      : undefined;
  try {
    const { run } = await openLoop(rig, {
      rate: options.rate,
      warmupMs: 0,
      durationMs: options.durationMs,
      drainMs: 5000,
    });
    clearInterval(sampler);
    clearInterval(vacuumer);
    await sampling;
    await sample();
    const tableStats: RetentionRun['tableStats'] = {};
    const stats = await db.query<{ relname: string; dead: string; vacuums: string; autovacuums: string }>(
      `SELECT relname, n_dead_tup AS dead, vacuum_count AS vacuums, autovacuum_count AS autovacuums
         FROM pg_stat_user_tables WHERE relname IN ('messages', 'deliveries', 'delivery_feeds')`,
    );
    for (const row of stats.rows)
      tableStats[row.relname] = {
        deadRows: Number(row.dead),
        vacuums: Number(row.vacuums),
        autovacuums: Number(row.autovacuums),
      };
    const final = samples.at(-1)!;
    const half = samples.find((x) => x.s >= final.s / 2) ?? final;
    const step = Math.max(1, Math.round(samples.length / 12));
    return {
      vacuum,
      delivered: run.totalDelivered,
      lost: run.lost,
      failed: run.failed,
      finalBytes: final.bytes,
      peakBytes: Math.max(...samples.map((x) => x.bytes)),
      tables,
      finalMessageRows: final.messageRows,
      bytesPerDeliveredMessage: run.totalDelivered ? round(final.bytes / run.totalDelivered) : 0,
      bytesPerRetainedMessage: final.messageRows ? Math.round(final.bytes / final.messageRows) : 0,
      growthSecondHalf: half.bytes ? round(final.bytes / half.bytes, 2) : 0,
      overTime: [...samples.filter((_, i) => i % step === 0 && i < samples.length - 1), final],
      tableStats,
    };
  } finally {
    clearInterval(sampler);
    clearInterval(vacuumer);
    rig.close();
    await db.end().catch(() => {});
    await killAll(); // this run's cluster and database; the next run starts from empty tables
  }
}

export async function benchRetention(options: RetentionOptions): Promise<RetentionResult> {
  const runs: RetentionRun[] = [];
  for (let i = 0; i < options.runs; i++) runs.push(await oneRun(options));
  const middle = [...runs].sort((a, b) => a.bytesPerDeliveredMessage - b.bytesPerDeliveredMessage)[
    Math.floor(runs.length / 2)
  ]!;
  return {
    durationS: options.durationMs / 1000,
    rate: options.rate,
    messageRetentionMs: options.messageRetentionMs,
    retentionIntervalMs: options.retentionIntervalMs,
    vacuum: runs[0]!.vacuum,
    runs,
    medianDelivered: Math.round(median(runs.map((r) => r.delivered))),
    medianFinalBytes: Math.round(median(runs.map((r) => r.finalBytes))),
    medianBytesPerDeliveredMessage: round(median(runs.map((r) => r.bytesPerDeliveredMessage))),
    medianGrowthSecondHalf: round(median(runs.map((r) => r.growthSecondHalf)), 2),
    overTime: middle.overTime,
  };
}
