/**
 * `workbench status [--env E] [--json]`: an environment (the local cluster by default) at a glance — phase, each node (health, background work,
 * flags acted on, disagreement with the environment's desired values), ownership (clock leaders, watch
 * owners, schedule occurrences fired in the last hour, the active lease), audit chain health, the promotion
 * activity (the promotion lock's holder, a pause, the last analysis: cli/promotion/activity.ts) and shadow
 * agreement per row over every node's /admin/shadow (cli/cluster/shadow-agreement.ts).
 *
 * The nodes are asked first and on their own (their /health answers 503 `unavailable` while Postgres is
 * down), so a database that does not answer still leaves each node's health on the screen, with a line
 * saying the database is unreachable and why; what only Postgres knows (phase, ownership, chains) is then
 * unknown (null in --json), and the exit code is 1.
 */
import { createPool } from '../../broker/db/pool.js';
import { defineCommand, type OptionSpec, type Parsed, UsageError } from '../args.js';
import { readChains, readOwnership } from '../cluster/ownership.js';
import { readShadowAgreement, type ShadowAgreement, shadowRowText } from '../cluster/shadow-agreement.js';
import { NODE_TIMEOUT_MS, resolveEnvironment } from '../environments/environment.js';
import { measurementText, type PromotionActivity, readPromotionActivity } from '../promotion/activity.js';
import { currentPhase } from '../promotion/promote.js';

interface NodeStatus {
  id: string;
  url: string;
  health: string;
  /** Postgres as the node sees it (`up`, `down`), null when the node did not answer. */
  db: string | null;
  backgroundWork: string;
  /** Flags it acts on otherwise than desired; null when unknown (the node did not answer). */
  disagreements: string[] | null;
  /** Its REGION as it heartbeats it (phase 4); null without one, or while the database is unreachable. */
  region: string | null;
  /** Its read pool's replica lag (`mesh_broker_replica_lag_seconds`); null where it reads the primary. */
  replicaLagSeconds: number | null;
}

/** The gauge from a node's /metrics text; absent on a node whose read pool is the primary. */
function replicaLagOf(metricsText: string): number | null {
  const match = /^mesh_broker_replica_lag_seconds(?:\{[^}]*\})? (\S+)$/m.exec(metricsText);
  return match ? Number(match[1]) : null;
}

const OPTIONS = {
  env: { type: 'string', value: 'E', help: 'the environment (default: the local cluster)' },
  json: {
    type: 'boolean',
    help: 'one JSON document on stdout, errors included ({"error": …}, exit non-zero)',
  },
} as const satisfies OptionSpec;

export const statusCommand = defineCommand({
  synopsis: ['status [--env E] [--json]'],
  about: `An environment at a glance: phase, each node (health, background work, flags acted on), ownership,
audit chains, the promotion lock, a paused promotion, the last analysis and shadow agreement per row; exit 1
if unhealthy (a node down, a chain broken).`,
  options: OPTIONS,
  jsonErrors: true,
  run: runStatusCommand,
});

async function runStatusCommand({ values, positionals }: Parsed<typeof OPTIONS>): Promise<number> {
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const environment = resolveEnvironment(values.env);
  const { target } = environment;
  const desired = await environment.flags.read();
  const nodes: NodeStatus[] = await Promise.all(
    target.nodes.map(async (node) => {
      try {
        const health = (await (
          await fetch(`${node.url}/health`, { signal: AbortSignal.timeout(NODE_TIMEOUT_MS) })
        ).json()) as {
          status: string;
          db?: string;
          backgroundWork: string;
        };
        const flags = (await (
          await fetch(`${node.url}/flags`, { signal: AbortSignal.timeout(NODE_TIMEOUT_MS) })
        ).json()) as {
          flags: Record<string, { value: boolean; acting: boolean }>;
        };
        // Only for the lag: a node whose /metrics does not answer still has its health shown.
        const metricsText = await fetch(`${node.url}/metrics`, {
          signal: AbortSignal.timeout(NODE_TIMEOUT_MS),
        })
          .then((r) => r.text())
          .catch(() => '');
        const disagreements = Object.entries(flags.flags)
          .filter(([key, state]) => state.acting !== desired[key as keyof typeof desired])
          .map(([key]) => key);
        return {
          id: node.id,
          url: node.url,
          health: health.status,
          db: health.db ?? null,
          backgroundWork: health.backgroundWork,
          disagreements,
          region: null,
          replicaLagSeconds: replicaLagOf(metricsText),
        };
      } catch {
        return {
          id: node.id,
          url: node.url,
          health: 'down',
          db: null,
          backgroundWork: '-',
          disagreements: null,
          region: null,
          replicaLagSeconds: null,
        };
      }
    }),
  );

  const [database, shadow] = await Promise.all([
    readDatabase(target.databaseUrl, environment),
    readShadowAgreement(target.nodes, target.adminToken, NODE_TIMEOUT_MS),
  ]);
  for (const node of nodes) node.region = database.state?.regions.get(node.id) ?? null;
  const status = {
    phase: database.state?.phase ?? null,
    environment: environment.name,
    loadBalancer: target.lbUrl,
    nodes,
    database:
      database.error === undefined ? { reachable: true } : { reachable: false, error: database.error },
    ownership: database.state?.ownership ?? null,
    chains: database.state?.chains ?? null,
    promotion: database.state?.promotion ?? null,
    shadow,
  };
  if (values.json) console.log(JSON.stringify(status, null, 2));
  else {
    printStatus(status, nodes, database);
    if (database.state) printPromotion(database.state.promotion);
    printShadow(shadow);
  }
  const healthy =
    database.state !== undefined &&
    nodes.every((n) => n.health === 'ok') &&
    database.state.chains.broken.length === 0;
  return healthy ? 0 : 1;
}

type DatabaseState = Awaited<ReturnType<typeof readDatabaseState>>;

/** What only Postgres knows, or why it could not be read (the database down, gone, not migrated). */
async function readDatabase(
  databaseUrl: string,
  environment: ReturnType<typeof resolveEnvironment>,
): Promise<{ state?: DatabaseState; error?: string }> {
  const pool = createPool(databaseUrl, { max: 2, applicationName: 'workbench-status' });
  // A pool whose server went away emits 'error' on idle clients; the failed query says it already.
  pool.on('error', () => {});
  try {
    return { state: await readDatabaseState(pool, environment) };
  } catch (error) {
    return { error: (error as Error).message || String(error) };
  } finally {
    await pool.end().catch(() => {});
  }
}

async function readDatabaseState(
  pool: ReturnType<typeof createPool>,
  environment: ReturnType<typeof resolveEnvironment>,
) {
  const { clockLeaders, watchOwners, scheduleOccurrencesLastHour, activeLease } = await readOwnership(pool);
  const chains = await readChains(pool);
  // Each node's REGION as its heartbeat records it (null outside phase 4).
  const regions = new Map(
    (
      await pool.query<{ id: string; region: string }>(
        'SELECT id, region FROM nodes WHERE region IS NOT NULL',
      )
    ).rows.map((r) => [r.id, r.region]),
  );
  return {
    regions,
    phase: await currentPhase(pool, environment.name, environment.phase),
    ownership: { clockLeaders, watchOwners, scheduleOccurrencesLastHour, activeLease: activeLease ?? null },
    chains: { intact: chains.intact, broken: chains.broken },
    promotion: await readPromotionActivity(pool, environment.name),
  };
}

/** The promotion lock, a pause, and the last analysis (docs/promotion.md § Promotion activity). */
function printPromotion(activity: PromotionActivity): void {
  const { lock, pause, analysis } = activity;
  console.log(
    `  promotion lock: ${lock ? `held by ${lock.holder} since ${lock.since ?? 'unknown'}${lock.ageMs === null ? '' : ` (${Math.round(lock.ageMs / 1000)} s${lock.stale ? ', stale: --force-unlock may take it' : ''})`}` : 'free'}`,
  );
  if (pause)
    console.log(
      `  PAUSED: phase ${pause.fromPhase} → ${pause.toPhase} at its ${pause.stage} analysis (${pause.metric}: ${pause.reason}) since ${pause.since}, by ${pause.actor}: promote --resume or --abort`,
    );
  if (!analysis) {
    console.log('  last analysis: none');
    return;
  }
  const stages = analysis.stages
    .map(
      (s) =>
        `${s.stage} ${s.verdict}${s.decided ? ` (${s.decided})` : ''}${s.metric ? ` on ${s.metric}` : ''}`,
    )
    .join(', ');
  console.log(
    `  last analysis: phase ${analysis.fromPhase} → ${analysis.toPhase} by ${analysis.actor ?? '?'} from ${analysis.startedAt}, ${analysis.outcome}${analysis.reason ? ` (${analysis.reason})` : ''}; ${stages}`,
  );
  for (const series of analysis.metrics)
    console.log(
      `    ${series.stage} ${series.metric}: ${series.measurements.map((m) => `${m.index}/${m.count} ${measurementText(m)}`).join(', ')}`,
    );
}

function printShadow(shadow: ShadowAgreement): void {
  if (shadow.rows.length === 0) console.log('  shadow: no row shadowed');
  for (const row of shadow.rows) console.log(`  shadow ${shadowRowText(row)}`);
  for (const { node, error } of shadow.unanswered) console.log(`  shadow: ${node} did not answer (${error})`);
}

function printStatus(
  status: { phase: number | null; environment: string; loadBalancer: string },
  nodes: NodeStatus[],
  database: { state?: DatabaseState; error?: string },
): void {
  const list = (rows: Array<{ node: string | null; n: number }>) =>
    rows.length === 0 ? 'none' : rows.map((r) => `${r.node ?? 'unowned'} ${r.n}`).join(', ');
  console.log(`phase ${status.phase ?? 'unknown'} (${status.environment}) behind ${status.loadBalancer}`);
  // The region column only where some node has one (phase 4), so phases 0-3 print as before.
  const regional = nodes.some((n) => n.region !== null || n.replicaLagSeconds !== null);
  for (const node of nodes) {
    const flags =
      node.disagreements === null
        ? 'flags unknown (no answer)'
        : node.disagreements.length === 0
          ? 'flags as desired'
          : `DISAGREES on ${node.disagreements.join(', ')}`;
    const db = node.db !== null && node.db !== 'up' ? `  db ${node.db}` : '';
    const region = regional ? `region ${(node.region ?? '?').padEnd(4)} ` : '';
    const lag = node.replicaLagSeconds === null ? '' : `  replica lag ${node.replicaLagSeconds} s`;
    console.log(
      `  ${node.id.padEnd(10)} ${region}${node.health.padEnd(11)} background ${node.backgroundWork.padEnd(8)} ${flags}${db}${lag}`,
    );
  }
  const { state } = database;
  if (!state) {
    console.log(`  database: UNREACHABLE (${database.error}): phase, ownership and audit chains unknown`);
    return;
  }
  const {
    clockLeaders,
    watchOwners,
    scheduleOccurrencesLastHour: fired,
    activeLease: lease,
  } = state.ownership;
  const { intact, broken } = state.chains;
  console.log(`  clock leaders: ${list(clockLeaders)}; watch owners: ${list(watchOwners)}`);
  console.log(`  schedule occurrences fired (last hour): ${list(fired)}`);
  console.log(
    `  active lease: ${lease ? `${lease.holder} (epoch ${lease.epoch}${lease.live ? '' : ', expired'})` : 'not used'}`,
  );
  console.log(
    `  audit chains: ${intact} intact, ${broken.length} broken${broken.length ? ` (${broken.join(', ')})` : ''}`,
  );
}
