import { defineCommand, type OptionSpec, type Parsed, UsageError } from '../args.js';
import { readCluster } from '../cluster/local.js';
import { type ControlOp, callControl } from '../cluster/regions/control.js';

/**
 * `workbench region cut|restore|promote REGION` and `workbench region kill-primary`: the failure
 * experiments of phase 4's simulation (docs/multi-region.md § How it fails), done by the running
 * `up --phase 4` process, which holds the links and the servers.
 */
const REGION_OPTIONS = {} as const satisfies OptionSpec;

const NEEDS_REGION: ControlOp[] = ['cut', 'restore', 'promote'];

export const regionCommand = defineCommand({
  synopsis: ['region cut|restore REGION', 'region kill-primary', 'region promote REGION'],
  about: `Acts on the running two-region simulation (workbench up --phase 4):
  cut REGION       stalls every link into and out of the region (database, Redis, replication, the entry's route)
  restore REGION   heals them: held bytes go out in order, held connections connect
  kill-primary     crashes the primary's Postgres (immediate stop)
  promote REGION   promotes the region's replica (pg_promote), fences the old primary, points every broker
                   at the new one and restarts them (each drains first)
Exit 1 when the simulation refuses (no such region, nothing to promote), 2 on a usage error.`,
  options: REGION_OPTIONS,
  run: runRegionCommand,
});

async function runRegionCommand({ positionals }: Parsed<typeof REGION_OPTIONS>): Promise<number> {
  const [action, region, ...extra] = positionals;
  const ops: ControlOp[] = ['cut', 'restore', 'promote', 'kill-primary'];
  if (!ops.includes(action as ControlOp))
    throw new UsageError(`unknown region action "${action ?? ''}" (expected ${ops.join(', ')})`);
  const op = action as ControlOp;
  if (NEEDS_REGION.includes(op) && !region) throw new UsageError(`usage: workbench region ${op} REGION`);
  const unexpected = NEEDS_REGION.includes(op) ? extra[0] : region;
  if (unexpected !== undefined) throw new UsageError(`unexpected argument "${unexpected}"`);
  const cluster = readCluster();
  if (!cluster?.regions)
    throw new Error('no two-region simulation here: start one with "workbench up --phase 4"');
  const result = await callControl(cluster.regions.supervisor.control, { op, region });
  console.log(describe(op, region, result as Record<string, number | string>));
  return 0;
}

function describe(
  op: ControlOp,
  region: string | undefined,
  result: Record<string, number | string>,
): string {
  switch (op) {
    case 'cut':
      return `region ${region}: ${result.links} links cut (bytes held, new connections hang)`;
    case 'restore':
      return `region ${region}: ${result.links} links restored`;
    case 'kill-primary':
      return `region ${result.region}: Postgres primary stopped (immediate)`;
    case 'promote':
      return `region ${region}: replica promoted in ${Math.round(Number(result.promotedMs))} ms; brokers restarted on it after ${Math.round(Number(result.restartedMs))} ms`;
  }
}
