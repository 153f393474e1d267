/**
 * `workbench status [--env E] [--json]`: an environment (the local cluster by default) at a glance — phase, each node (health, background work,
 * flags acted on, disagreement with the environment's desired values), ownership (clock leaders, watch
 * owners, schedule occurrences fired in the last hour, the active lease) and audit chain health.
 */
import { createPool } from '../../broker/db/pool.js';
import { defineCommand, type OptionSpec, type Parsed, UsageError } from '../args.js';
import { readChains, readOwnership } from '../cluster/ownership.js';
import { NODE_TIMEOUT_MS, resolveEnvironment } from '../environments/environment.js';
import { currentPhase } from '../promotion/promote.js';

interface NodeStatus {
  id: string;
  url: string;
  health: string;
  backgroundWork: string;
  /** Flags it acts on otherwise than desired; null when unknown (the node did not answer). */
  disagreements: string[] | null;
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
  about: `An environment at a glance: phase, each node (health, background work, flags acted on), ownership and
audit chains; exit 1 if unhealthy (a node down, a chain broken).`,
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
          backgroundWork: string;
        };
        const flags = (await (
          await fetch(`${node.url}/flags`, { signal: AbortSignal.timeout(NODE_TIMEOUT_MS) })
        ).json()) as {
          flags: Record<string, { value: boolean; acting: boolean }>;
        };
        const disagreements = Object.entries(flags.flags)
          .filter(([key, state]) => state.acting !== desired[key as keyof typeof desired])
          .map(([key]) => key);
        return {
          id: node.id,
          url: node.url,
          health: health.status,
          backgroundWork: health.backgroundWork,
          disagreements,
        };
      } catch {
        return { id: node.id, url: node.url, health: 'down', backgroundWork: '-', disagreements: null };
      }
    }),
  );

  const pool = createPool(target.databaseUrl, { max: 2, applicationName: 'workbench-status' });
  try {
    const {
      clockLeaders,
      watchOwners,
      scheduleOccurrencesLastHour: fired,
      activeLease: lease,
    } = await readOwnership(pool);
    const { intact, broken } = await readChains(pool);
    const status = {
      phase: await currentPhase(pool, environment.name, environment.phase),
      environment: environment.name,
      loadBalancer: target.lbUrl,
      nodes,
      ownership: {
        clockLeaders,
        watchOwners,
        scheduleOccurrencesLastHour: fired,
        activeLease: lease ?? null,
      },
      chains: { intact, broken },
    };
    if (values.json) {
      console.log(JSON.stringify(status, null, 2));
    } else {
      const list = (rows: Array<{ node: string | null; n: number }>) =>
        rows.length === 0 ? 'none' : rows.map((r) => `${r.node ?? 'unowned'} ${r.n}`).join(', ');
      console.log(`phase ${status.phase} (${status.environment}) behind ${status.loadBalancer}`);
      for (const node of nodes) {
        const flags =
          node.disagreements === null
            ? 'flags unknown (no answer)'
            : node.disagreements.length === 0
              ? 'flags as desired'
              : `DISAGREES on ${node.disagreements.join(', ')}`;
        console.log(
          `  ${node.id.padEnd(10)} ${node.health.padEnd(11)} background ${node.backgroundWork.padEnd(8)} ${flags}`,
        );
      }
      console.log(`  clock leaders: ${list(clockLeaders)}; watch owners: ${list(watchOwners)}`);
      console.log(`  schedule occurrences fired (last hour): ${list(fired)}`);
      console.log(
        `  active lease: ${lease ? `${lease.holder} (epoch ${lease.epoch}${lease.live ? '' : ', expired'})` : 'not used'}`,
      );
      console.log(
        `  audit chains: ${intact} intact, ${broken.length} broken${broken.length ? ` (${broken.join(', ')})` : ''}`,
      );
    }
    const healthy = nodes.every((n) => n.health === 'ok') && broken.length === 0;
    return healthy ? 0 : 1;
  } finally {
    await pool.end();
  }
}
