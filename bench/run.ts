/**
 * `npm run bench [-- --quick] [-- --only a,b]`: runs the benchmarks and prints their figures as JSON lines.
 * Full: each scenario measured 5 times (medians reported) and PNG plots of the latency distributions in
 * bench/plots/. `--quick` (what CI runs) keeps each scenario to one short run, only to prove the scenarios
 * still work. Every process a scenario starts is SIGKILLed at the end, on failure too.
 * Scenarios: fanout (a), stream-positions (a2: fan-out with stream positions on ÷ off), shadow-cost (a3:
 * fan-out and DM throughput with shadow mode on ÷ off), dms (b), dms-open (b2), db-floor (b1), retention (b3), audit (c), failover (d),
 * idle (e), cli (f), regions (g: phase 4's two-region simulation, one run; needs `npm run build`),
 * rolling-restart (h: `workbench restart --rolling` under 5,000 sessions against a single kill, one run a
 * time; --quick: 150 sessions). `--retention-s N`: retention's run length in seconds (default 300 in a full run, 4 in --quick).
 * db-floor prints the closed-loop `dms` figure of the same invocation as a ratio of each floor (when both
 * ran); fanout prints each system's server CPU per delivery and ours as a ratio of it.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../broker/paths.js';
import { benchAuditAppends } from './audit-appends.js';
import { benchCliStartup } from './cli-startup.js';
import { benchDbFloor } from './db-floor.js';
import { benchDms, benchDmsOpen } from './dms.js';
import { benchFailover } from './failover.js';
import { benchFanout } from './fanout.js';
import { benchIdle } from './idle.js';
import { plotCdf } from './lib/plot.js';
import { killAll } from './lib/processes.js';
import { round } from './lib/stats.js';
import { benchRegions } from './regions.js';
import { benchRetention } from './retention.js';
import { benchRollingRestart } from './rolling-restart.js';
import { benchShadowCost } from './shadow-cost.js';
import { benchStreamPositions } from './stream-positions.js';

const quick = process.argv.includes('--quick');
const onlyIndex = process.argv.indexOf('--only');
const only = onlyIndex > 0 ? new Set(process.argv[onlyIndex + 1]?.split(',')) : undefined;
const wanted = (name: string) => !only || only.has(name);
const runsIndex = process.argv.indexOf('--runs');
/** `--runs N` overrides the 5 runs of a full benchmark (e.g. one long idle-connections run). */
const runs = runsIndex > 0 ? Math.max(1, Number(process.argv[runsIndex + 1]) || 1) : quick ? 1 : 5;
const retentionIndex = process.argv.indexOf('--retention-s');
const retentionSeconds =
  retentionIndex > 0 ? Math.max(1, Number(process.argv[retentionIndex + 1]) || 1) : quick ? 4 : 300;
const beforeIndex = process.argv.indexOf('--cli-before');
/** `--cli-before PATH`: an older build's dist/cli/main.js, timed by the `cli` scenario in the same run. */
const cliBefore = beforeIndex > 0 ? process.argv[beforeIndex + 1] : undefined;
const plots = join(packageRoot(), 'bench', 'plots');
const emit = (scenario: string, result: object) =>
  console.log(JSON.stringify({ scenario, quick, ...result }));
/** Latency arrays are for the plots; the JSON lines carry the figures only. */
const withoutLatencies = <T extends { latencies?: unknown }>({ latencies: _, ...rest }: T) => rest;

process.on('SIGINT', () => void killAll().then(() => process.exit(130)));
process.on('SIGTERM', () => void killAll().then(() => process.exit(143)));

let failed = false;
async function scenario(name: string, body: () => Promise<void>) {
  if (!wanted(name)) return;
  const started = Date.now();
  try {
    await body();
  } catch (error) {
    failed = true;
    emit(name, { error: (error as Error).message });
  } finally {
    await killAll();
    console.error(`bench: ${name} took ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }
}

if (!quick) mkdirSync(plots, { recursive: true });

await scenario('fanout', async () => {
  const results = await benchFanout({
    runs,
    durationMs: quick ? 1000 : 3000,
    warmupMs: quick ? 300 : 500,
    publishers: 2,
    subscribers: 20,
    payloadBytes: 256,
    window: 64,
  });
  const ours = results.find((r) => r.system === 'ours')!;
  for (const result of results)
    emit('fanout', {
      ...withoutLatencies(result),
      ratioOursToThis:
        Math.round((ours.medianDeliveriesPerSecond / result.medianDeliveriesPerSecond) * 100) / 100,
      // µs of server CPU per delivery, ours ÷ this system's (goal against the raw relay: ≤ 1).
      cpuRatioOursToThis: result.medianServerCpuUsPerDelivery
        ? Math.round((ours.medianServerCpuUsPerDelivery / result.medianServerCpuUsPerDelivery) * 100) / 100
        : null,
    });
  if (!quick)
    plotCdf(join(plots, 'fanout-latency.png'), [
      { colour: 'blue', values: ours.latencies },
      { colour: 'orange', values: results.find((r) => r.system === 'socket.io')!.latencies },
      { colour: 'green', values: results.find((r) => r.system === 'raw-relay')!.latencies },
    ]);
});

await scenario('stream-positions', async () => {
  emit(
    'stream-positions',
    await benchStreamPositions({
      runs,
      durationMs: quick ? 1000 : 3000,
      warmupMs: quick ? 300 : 500,
      publishers: 2,
      subscribers: 20,
      payloadBytes: 256,
      window: 64,
    }),
  );
});

await scenario('shadow-cost', async () => {
  emit(
    'shadow-cost',
    await benchShadowCost(
      {
        runs,
        durationMs: quick ? 1000 : 3000,
        warmupMs: quick ? 300 : 500,
        publishers: 2,
        subscribers: 20,
        payloadBytes: 256,
        window: 64,
      },
      { runs, durationMs: quick ? 1000 : 3000, warmupMs: quick ? 300 : 500, pairs: 8, window: 16 },
    ),
  );
});

/** The closed-loop `dms` median of this invocation, for db-floor's ratios. */
let dmsPerSecond: number | undefined;

await scenario('dms', async () => {
  const result = await benchDms({
    runs,
    durationMs: quick ? 1000 : 3000,
    warmupMs: quick ? 300 : 500,
    pairs: 8,
    window: 16,
  });
  dmsPerSecond = result.medianPerSecond;
  emit('dms', withoutLatencies(result));
  if (!quick) plotCdf(join(plots, 'dm-latency.png'), [{ colour: 'blue', values: result.latencies }]);
});

await scenario('dms-open', async () => {
  const result = await benchDmsOpen({
    runs,
    rate: 1000,
    warmupMs: quick ? 300 : 1000,
    durationMs: quick ? 1000 : 5000,
    pairs: 8,
  });
  emit('dms-open', withoutLatencies(result));
  if (!quick) plotCdf(join(plots, 'dm-open-latency.png'), [{ colour: 'blue', values: result.latencies }]);
});

await scenario('db-floor', async () => {
  const results = await benchDbFloor({
    runs,
    warmupMs: quick ? 200 : 500,
    durationMs: quick ? 1000 : 3000,
    writers: 4,
    pairsPerWriter: 2,
    batch: 64,
  });
  for (const result of results)
    emit('db-floor', {
      ...result,
      dmsPerSecond: dmsPerSecond ?? null,
      // Our closed-loop durable DMs ÷ what Postgres alone takes of the same rows.
      ratioDmsToThis:
        dmsPerSecond === undefined ? null : Math.round((dmsPerSecond / result.medianPerSecond) * 1000) / 1000,
    });
});

await scenario('retention', async () => {
  const result = await benchRetention({
    runs,
    durationMs: retentionSeconds * 1000,
    rate: 1000,
    pairs: 8,
    messageRetentionMs: quick ? 1000 : 5000,
    retentionIntervalMs: quick ? 500 : 1000,
    sampleMs: quick ? 250 : Math.max(1000, (retentionSeconds * 1000) / 300),
    vacuumEveryMs: quick ? 1000 : 10_000,
  });
  emit('retention', result);
});

await scenario('audit', async () => {
  const results = await benchAuditAppends({ runs, entries: quick ? 500 : 10_000 });
  for (const result of results) emit('audit-appends', result);
});

await scenario('failover', async () => {
  const result = await benchFailover({ runs, peers: quick ? 20 : 100 });
  emit('failover', withoutLatencies(result));
  if (!quick)
    plotCdf(join(plots, 'reconnect-after-kill.png'), [{ colour: 'blue', values: result.latencies }]);
});

await scenario('idle', async () => {
  emit('idle', await benchIdle({ runs, connections: quick ? 400 : 20_000 }));
});

await scenario('cli', async () => {
  // 30 runs by default (each is a few hundred ms); --quick: 3, only to keep it working.
  const figures = await benchCliStartup({ runs: runsIndex > 0 ? runs : quick ? 3 : 30, before: cliBefore });
  for (const figure of figures) {
    const before = figures.find((f) => f.binary === 'before' && f.command === figure.command);
    emit('cli', {
      ...figure,
      // current ÷ before, whole process and the CLI's own share (when --cli-before was given).
      ratioToBefore:
        before && figure.binary === 'current' ? round(figure.medianMs / before.medianMs, 2) : null,
      ownRatioToBefore: before && figure.binary === 'current' ? round(figure.ownMs / before.ownMs, 2) : null,
    });
  }
});

await scenario('rolling-restart', async () => {
  // Each run is a phase-3 `workbench up`, 5,000 sessions, a kill and two rolls: minutes, not seconds.
  for (let i = 0; i < (quick ? 1 : Math.min(runs, 3)); i++) {
    const result = await benchRollingRestart(quick ? 150 : 5000, quick ? 20 : 100);
    emit('rolling-restart', withoutLatencies(result));
    if (!quick && i === 0)
      plotCdf(join(plots, 'resume-during-roll.png'), [{ colour: 'blue', values: result.latencies }]);
  }
});

await scenario('regions', async () => {
  // One run per Patroni mode (each simulation takes ~1 min to start and holds 4 brokers, 5 HAProxies, 2
  // Patroni with their Postgres, etcd, 2 Redis): asynchronous and synchronous (zero acknowledged loss).
  for (const sync of [false, true]) {
    emit(
      sync ? 'regions-sync' : 'regions',
      await benchRegions(
        quick
          ? { rttMs: 40, jitterMs: 2, dms: 10, lists: 10, joins: 2, ticks: 10, sync }
          : { rttMs: 40, jitterMs: 2, dms: 200, lists: 100, joins: 10, ticks: 50, sync },
      ),
    );
  }
});

process.exitCode = failed ? 1 : 0;
