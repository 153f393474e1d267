/**
 * One chaos run: throw-away Postgres and Redis, a phase 3 cluster (every HA flag on) in a temp folder
 * with the fast timings, each broker reaching Postgres and Redis through proxies of its own (./partitions.ts:
 * cut by the partitions, lossy on the bus during a `bus-loss`), the workloads, the seeded faults at their times, a bounded drain, the verdict.
 * Everything it started is stopped and deleted at the end, whatever happened (Ctrl-C included), unless
 * `keep`, which leaves it all running for a look at `.workbench/logs`.
 * Every run records a history (`history` or `history.jsonl` in the temp folder; docs/chaos.md § History):
 * the workloads' operations, the faults and flag flips as they happen, the audit chains read from
 * `audit_log` at the end; the independent checkers (cli/checkers/) judge it as one more property.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createPool, type Pool } from '../../broker/db/pool.js';
import { flagChangeLedger } from '../../broker/flag-changes.js';
import { pushRefreshOnce } from '../../broker/flag-refresh.js';
import type { PlantName } from '../../broker/plants.js';
import { fileFlagsAccess } from '../../flags/access.js';
import { changeFlag } from '../../flags/changes.js';
import { type FlagKey, isFlagKey } from '../../flags/registry.js';
import { checkHistory } from '../checkers/check.js';
import { onExit } from '../cluster/exit-cleanup.js';
import { FAST_CLUSTER } from '../cluster/fast-timings.js';
import { type ClusterFile, down, killClusterNow, startNode, stopNode, up } from '../cluster/local.js';
import { HistoryWriter } from '../history/writer.js';
import { DeliveryChecker } from '../load/checker.js';
import { buildReport, type LoadReport } from '../load/report.js';
import { normalizeUrl } from '../load/target.js';
import { probeCapacity } from './capacity.js';
import {
  describeFault,
  type Fault,
  type FaultKind,
  type FaultTargets,
  inflict,
  planFaults,
} from './faults.js';
import { LeaseWatch } from './lease-watch.js';
import { McpWorkload } from './mcp-workload.js';
import { pauseLeader, restartSkewed, waitNodeHealthy } from './node-faults.js';
import { type BusStats, NodeLinks } from './partitions.js';
import { judgePlant, type PlantVerdict, plantEnv } from './plants.js';
import { ThrowawayPostgres, ThrowawayRedis } from './services.js';
import { sleep } from './sleep.js';
import {
  auditProperty,
  clockProperty,
  deliveryProperties,
  type Property,
  scheduleProperty,
} from './verify.js';
import { WatchWorkload } from './watch-workload.js';
import { type WorkloadReport, workloadProperty, workloadReport } from './workload-report.js';
import {
  type ChaosCluster,
  ClockWorkload,
  LOAD_SHAPE,
  loadEntries,
  ratesFor,
  runLoad,
  ScheduleWorkload,
  targetFor,
} from './workloads.js';

/** The nodes of the phase 3 topology `up` starts (broker-1…3): fault targets are planned before it runs. */
export const CHAOS_NODES = ['broker-1', 'broker-2', 'broker-3'];
/**
 * Broker settings on top of the fast timings: a clock ticking 10 times a second, short drains; a send
 * limit far above what a load peer sends (the capacity probe offers up to 320 DMs a second over 32 peers:
 * the default 60 a minute per member would measure the limiter, not the cluster); watches of the chaos
 * process's own loopback server allowed.
 */
const CHAOS_ENV = {
  ...FAST_CLUSTER,
  CLOCK_TICK_MS: '100',
  DRAIN_TIMEOUT_MS: '3000',
  SEND_RATE_PER_MIN: '60000',
  SEND_BURST: '1000',
  WATCH_ALLOW_PRIVATE: 'true',
};
/** After the load stops: how long owed deliveries and due schedules may take to arrive. */
const DRAIN_MS = 20_000;
/** After the last schedule fired: how long to keep listening for a second firing. */
const SETTLE_MS = 2000;

export interface ChaosOptions {
  seed: number;
  durationMs: number;
  faults: number;
  /** Where the history goes (default: history.jsonl in the run's temp folder, deleted with it). */
  history?: string;
  /** Only these fault kinds (default: every kind). */
  kinds?: readonly FaultKind[];
  keep: boolean;
  log: (line: string) => void;
  signal: AbortSignal;
  /** A planted bug the brokers (or the workload's SDK) run with (docs/chaos.md § Planted bugs). */
  plant?: PlantName;
}

export interface FaultRecord extends Fault {
  description: string;
  /** When it actually started and ended (ms after the workloads started); absent if it never ran. */
  startedAtMs?: number;
  endedAtMs?: number;
  error?: string;
  /** bus-loss: the publishes the proxies saw while it lasted, and how many of them they dropped. */
  busLoss?: BusStats;
  /** What the fault found to act on (leader-pause: the node it stopped). */
  note?: string;
}

export interface ChaosReport {
  ok: boolean;
  interrupted: boolean;
  seed: number;
  durationMs: number;
  /** `--kinds`, when the run was limited to some kinds. */
  kinds?: readonly FaultKind[];
  faults: FaultRecord[];
  properties: Property[];
  load?: LoadReport;
  /** Capacity measured before the faults, the target taken from it, and the rates achieved per kind. */
  workload?: WorkloadReport;
  /** The history file and how many operations it holds. */
  history?: { path: string; operations: number };
  /** The working folder (cluster.json, logs) when kept. */
  kept?: { dir: string; postgres: string; redisPid?: number };
  error?: string;
  /** With `--plant`: whether the run caught it (failed, naming one of the plant's anomalies). */
  plant?: PlantVerdict;
}

const sleepUntil = (at: number, signal: AbortSignal) => sleep(at - Date.now(), signal);

export function planFor(
  options: Pick<ChaosOptions, 'seed' | 'durationMs' | 'faults' | 'kinds'>,
): FaultRecord[] {
  return planFaults(options.seed, { ...options, nodes: CHAOS_NODES }).map((f) => ({
    ...f,
    description: describeFault(f),
  }));
}

export async function runChaos(options: ChaosOptions): Promise<ChaosReport> {
  const { log, signal } = options;
  const faults = planFor(options);
  const report: ChaosReport = {
    ok: false,
    interrupted: false,
    seed: options.seed,
    durationMs: options.durationMs,
    ...(options.kinds ? { kinds: options.kinds } : {}),
    faults,
    properties: [],
    // Not caught until a verdict names it (a run that errors or is interrupted catches nothing).
    ...(options.plant ? { plant: judgePlant(options.plant, true, new Set()) } : {}),
  };
  let postgres: ThrowawayPostgres | undefined;
  let redis: ThrowawayRedis | undefined;
  let proxy: NodeLinks | undefined;
  let pool: Pool | undefined;
  let cluster: ClusterFile | undefined;
  let schedules: ScheduleWorkload | undefined;
  let clock: ClockWorkload | undefined;
  let mcp: McpWorkload | undefined;
  let watches: WatchWorkload | undefined;
  let history: HistoryWriter | undefined;
  let lease: LeaseWatch | undefined;
  const cwd = mkdtempSync(join(tmpdir(), 'wb-chaos-'));
  // Last resort: a run that dies (an uncaught error, a signal) still stops its brokers, load balancer and
  // Redis (the throw-away Postgres registers its own); the finally below is the normal way.
  const unregisterCleanup = onExit(() => {
    if (options.keep) return;
    killClusterNow(cwd);
    redis?.killNow();
  });
  try {
    history = new HistoryWriter(options.history ?? join(cwd, 'history.jsonl'));
    // Durable (fsync, synchronous_commit): a postgres-crash must lose nothing that was committed.
    postgres = await ThrowawayPostgres.create({ durable: true });
    redis = await ThrowawayRedis.start();
    // Every broker reaches Postgres and Redis through proxies of its own (./partitions.ts): cut for the
    // partitions, lossy on bus channels while a bus-loss holds. The run's own flag pushes go to Redis directly.
    proxy = await NodeLinks.start(CHAOS_NODES, {
      postgresPort: postgres.port,
      redisPort: redis.port,
      seed: options.seed,
    });
    const links = proxy;
    log(
      `throw-away postgres on :${postgres.port} (fsync on), redis-server on :${redis.port} (each broker through proxies of its own); cluster in ${cwd}`,
    );
    const databaseUrl = postgres.urlOf('chaos');
    cluster = await up({
      phase: 3,
      port: 0,
      databaseUrl,
      redisUrl: redis.url,
      nodeEnv: (id, shared) => links.env(id, shared),
      cwd,
      env: { ...CHAOS_ENV, ...plantEnv(options.plant) },
      log,
    });
    const ids = cluster.nodes.map((n) => n.id);
    if (ids.join() !== CHAOS_NODES.join())
      throw new Error(
        `phase 3 started nodes ${ids.join(', ')}, the fault plan expects ${CHAOS_NODES.join(', ')}`,
      );
    pool = createPool(databaseUrl, { max: 3, applicationName: 'workbench-chaos' });
    const target: ChaosCluster = {
      adminUrl: cluster.lb.url,
      adminToken: cluster.adminToken,
      lbWs: normalizeUrl(cluster.lb.url).ws,
      nodeWs: cluster.nodes.map((n) => ({ id: n.id, ws: normalizeUrl(n.url).ws })),
    };
    log(`cluster up: ${cluster.lb.kind} at ${cluster.lb.url}, ${ids.join(', ')}`);

    // The capacity of this cluster first (bounded, before any fault), then the workload at a share of it.
    const capacity = await probeCapacity(target, signal, log);
    const targetPerSecond = targetFor(capacity.dmPerSecond);
    const rates = ratesFor(targetPerSecond);
    log(
      `capacity ${capacity.dmPerSecond} DM/s; workload at ${targetPerSecond} durable sends/s: ` +
        `${rates.dm} dm, ${rates.broadcast} broadcast, ${rates.group} group, ${rates.stream} stream, ${rates.mcp} mcp a second`,
    );
    lease = LeaseWatch.start(pool);
    schedules = await ScheduleWorkload.start(target, history);
    clock = await ClockWorkload.start(target, history);
    mcp = await McpWorkload.start(target, history);
    watches = await WatchWorkload.start(target, history);
    watches.run();
    const checker = new DeliveryChecker();
    const t0 = Date.now();
    const calling = mcp.run(rates.mcp, options.durationMs, signal);
    const load = runLoad(target, checker, {
      rates,
      durationMs: options.durationMs,
      drainMs: DRAIN_MS,
      signal,
      history,
      ...(options.plant === 'sdk-dedup-off' ? { dedup: false } : {}),
    });
    // Schedules stop being created early enough that the last is due (≤ 4 s later) before the run ends.
    const scheduling = schedules.run(options.seed, Math.max(0, options.durationMs - 6000), signal);
    const targets = faultTargets(cwd, cluster, postgres, redis, proxy, pool, signal, history);
    for (const fault of faults) {
      await sleepUntil(t0 + fault.atMs, signal);
      if (signal.aborted) break;
      fault.startedAtMs = Date.now() - t0;
      log(`+${(fault.startedAtMs / 1000).toFixed(1)} s  ${fault.description}`);
      const before = proxy.busStats();
      recordFault(history, fault, 'start');
      try {
        const note = await inflict(fault, targets);
        if (note) {
          fault.note = note;
          log(`  ${note}`);
        }
      } catch (error) {
        fault.error = (error as Error).message;
        log(`  fault did not recover: ${fault.error}`);
      }
      fault.endedAtMs = Date.now() - t0;
      recordFault(history, fault, 'end');
      if (fault.kind === 'bus-loss') {
        const after = proxy.busStats();
        fault.busLoss = {
          publishes: after.publishes - before.publishes,
          dropped: after.dropped - before.dropped,
        };
        log(`  bus-loss: ${fault.busLoss.dropped} of ${fault.busLoss.publishes} bus publishes dropped`);
        // A loss that dropped nothing tested nothing (the brokers' bus is not behind the proxy?).
        if (fault.busLoss.dropped === 0 && !fault.error)
          fault.error = `no publish was dropped (${fault.busLoss.publishes} seen by the proxy)`;
      }
    }
    const facts = await load;
    watches.stop();
    await scheduling;
    await calling;
    report.load = buildReport(checker.result(), {
      ...facts,
      peers: LOAD_SHAPE.peers,
      meshes: LOAD_SHAPE.meshes,
      nodes: loadEntries(target),
    });
    // Owed schedule firings get the same bounded drain as messages, then a while to catch a second firing.
    const drainUntil = Date.now() + DRAIN_MS;
    while (
      !signal.aborted &&
      Date.now() < drainUntil &&
      [...schedules.created.keys()].some((id) => !schedules!.fired.has(id))
    )
      await new Promise((resolve) => setTimeout(resolve, 100));
    await sleepUntil(Date.now() + SETTLE_MS, signal);
    await clock.close();
    await watches.close();
    mcp.close();
    report.workload = workloadReport({
      capacity,
      targetPerSecond,
      offered: rates,
      entries: loadEntries(target),
      durationMs: facts.durationMs,
      accepted: {
        ...facts.accepted,
        mcp: mcp.accepted,
        schedule: schedules.created.size,
        watch: watches.fired,
        clock: [...clock.ticks.values()].reduce((n, ticks) => n + ticks.length, 0),
      },
    });
    if (signal.aborted) {
      report.interrupted = true;
      return report;
    }
    lease.stop();
    // The chains are verified before they are copied into the history: the brokers still run and may append
    // meanwhile, so every entry the verifier walked is in the history (which may hold a few more).
    const audit = await auditProperty(pool);
    await recordAudit(pool, history);
    report.history = { path: history.path, operations: history.count };
    history.close();
    const checked = await historyProperty(history.path);
    report.properties = [
      workloadProperty(report.workload),
      ...deliveryProperties(report.load),
      audit,
      await scheduleProperty(pool, schedules),
      clockProperty(clock),
      lease.property(),
      faultsProperty(faults),
      checked.property,
    ];
    report.ok = report.properties.every((p) => p.ok);
    if (options.plant) {
      const named = new Set([...report.properties.filter((p) => !p.ok).map((p) => p.name), ...checked.kinds]);
      report.plant = judgePlant(options.plant, report.ok, named);
    }
    return report;
  } catch (error) {
    report.error = (error as Error).message;
    report.interrupted = signal.aborted;
    return report;
  } finally {
    try {
      history?.close();
    } catch (error) {
      report.error ??= (error as Error).message;
      report.ok = false;
    }
    // Each step on its own: one that throws must not leave the cluster running.
    const step = async (what: string, work: () => unknown) => {
      try {
        await work();
      } catch (error) {
        log(`cleanup: ${what} failed: ${(error as Error).message}`);
      }
    };
    await step('lease watch', () => lease?.stop());
    await step('schedules', () => schedules?.close());
    await step('clock observers', () => clock?.close());
    await step('mcp workload', () => mcp?.close());
    await step('watches', () => watches?.close());
    await pool?.end().catch(() => {});
    unregisterCleanup();
    if (options.keep) {
      // The proxies live in this process and end with it: the kept brokers then have no Redis (it is
      // reported, not required); their logs are what --keep keeps.
      await proxy?.close();
      redis?.detach();
      report.kept = { dir: cwd, postgres: postgres?.dir ?? '', redisPid: redis?.pid };
    } else {
      await down(cwd).catch((error) => log(`workbench down failed: ${(error as Error).message}`));
      await proxy?.close();
      postgres?.destroy();
      await redis?.stop();
      rmSync(cwd, { recursive: true, force: true });
    }
  }
}

/** Every fault ran and what it stopped came back (a node that does not restart is a finding too). */
function faultsProperty(faults: FaultRecord[]): Property {
  const problems = faults.flatMap((f) =>
    f.startedAtMs === undefined
      ? [`${f.description}: never ran`]
      : f.error
        ? [`${f.description}: ${f.error}`]
        : [],
  );
  const kinds = new Set(faults.filter((f) => f.endedAtMs !== undefined && !f.error).map((f) => f.kind));
  return {
    name: 'faults-recovered',
    ok: problems.length === 0,
    summary: `${faults.length - problems.length}/${faults.length} faults inflicted and recovered (${[...kinds].join(', ')})`,
    problems,
  };
}

function faultTargets(
  cwd: string,
  cluster: ClusterFile,
  postgres: ThrowawayPostgres,
  redis: ThrowawayRedis,
  proxy: NodeLinks,
  pool: Pool,
  signal: AbortSignal,
  history: HistoryWriter,
): FaultTargets {
  const flags = fileFlagsAccess(cluster.flagsDir, cluster.flagsEnv);
  return {
    killNode: (id, how) => stopNode(cwd, id, how),
    startNode: (id) => startNode(cwd, id),
    stopRedis: () => redis.stop(),
    startRedis: () => redis.restart(),
    stallRedis: (ms) => redis.stall(ms, signal),
    restartPostgres: () => postgres.restart(),
    setBusLoss: (rate) => proxy.setBusLoss(rate),
    cutNode: (id, path, way) => {
      if (path === 'postgres') proxy.cutPostgres(id, way);
      else if (path === 'redis') proxy.cutRedis(id, way);
      else proxy.cutPeers(id, way);
    },
    healNode: (id) => proxy.heal(id),
    waitNode: (id) => waitNodeHealthy(cwd, id),
    pauseLeader: (leader, ms) => pauseLeader(cwd, pool, leader, ms),
    skewNode: (id, skewMs) => restartSkewed(cwd, id, skewMs),
    crashPostgres: () => postgres.crash(),
    // As `workbench flags set` does it: the provider written under the flag's lock with its audit event,
    // then "refresh now" pushed to the nodes (their poll is the backstop).
    setFlag: async (flag, on) => {
      if (!isFlagKey(flag)) throw new Error(`unknown flag ${flag}`);
      history.record({ type: 'info', f: 'flag-flip', process: 'nemesis', value: { flag, value: on } });
      await changeFlag(flagChangeLedger(pool), flags, {
        environment: cluster.flagsEnv,
        flag: flag as FlagKey,
        value: on,
        actor: 'workbench-chaos',
      });
      await pushRefreshOnce({ redisUrl: redis.url, keyPrefix: cluster.redisKeyPrefix }, cluster.flagsEnv, {
        flag,
        value: on,
      });
    },
  };
}

/** A fault as two `info` events of the nemesis (Jepsen's name for the fault injector): start and end. */
function recordFault(history: HistoryWriter, fault: FaultRecord, phase: 'start' | 'end'): void {
  const { description, busLoss, error, ...plan } = fault;
  history.record({
    type: 'info',
    f: 'fault',
    process: 'nemesis',
    value: { phase, description, ...plan, ...(phase === 'end' && error ? { error } : {}) },
  });
}

/**
 * Every audit entry, read from `audit_log` once the workloads are done (the chain is the database's:
 * the brokers append it, no peer sees it), one `info` event per entry in (chain, seq, row) order, read in
 * pages so a day-long run's chains are never held whole.
 */
async function recordAudit(pool: Pool, history: HistoryWriter): Promise<void> {
  const PAGE = 5000;
  let after: [string, string, string] = ['00000000-0000-0000-0000-000000000000', '-1', '-1'];
  for (;;) {
    const rows = await pool.query<{ mesh: string; seq: string; hash: string; prevHash: string; id: string }>(
      `SELECT mesh_id AS mesh, seq, hash, prev_hash AS "prevHash", id FROM audit_log
        WHERE (mesh_id, seq, id) > ($1::uuid, $2::bigint, $3::bigint) ORDER BY mesh_id, seq, id LIMIT ${PAGE}`,
      after,
    );
    for (const row of rows.rows)
      history.record({
        type: 'info',
        f: 'audit-append',
        process: 'audit',
        value: {
          mesh: row.mesh,
          seq: Number(row.seq),
          hash: row.hash,
          prevHash: row.prevHash,
          row: Number(row.id),
        },
      });
    const last = rows.rows.at(-1);
    if (!last || rows.rows.length < PAGE) return;
    after = [last.mesh, String(last.seq), String(last.id)];
  }
}

/**
 * The independent checkers over the run's own history (what `workbench chaos check` would say), and the
 * kinds of anomaly they named (a plant's verdict looks for its own).
 */
async function historyProperty(path: string): Promise<{ property: Property; kinds: string[] }> {
  const result = await checkHistory(path);
  const counts = Object.entries(result.counts).map(([kind, n]) => `${n} ${kind}`);
  const property: Property = {
    name: 'history',
    ok: result.ok,
    summary:
      `${result.events} operations (${Object.values(result.summaries).join('; ')})` +
      `${counts.length ? `; ${counts.join(', ')}` : ''}; checked at ${result.operationsPerSecond} operations/s`,
    problems: result.anomalies
      .slice(0, 10)
      .map((a) => `${a.kind}: ${a.message} (operations ${a.operations.join(', ')})`),
  };
  return { property, kinds: Object.keys(result.counts) };
}
