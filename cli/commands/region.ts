import { defineCommand, type OptionSpec, type Parsed, UsageError } from '../args.js';
import { readCluster } from '../cluster/local.js';
import { PATRONI_TIMINGS } from '../cluster/patroni.js';
import { type ControlOp, callControl } from '../cluster/regions/control.js';

/**
 * `workbench region cut|restore|promote|rejoin REGION`, `workbench region kill-primary|status`: the
 * failure experiments of phase 4's simulation (docs/multi-region.md § How it fails), done by the running
 * `up --phase 4` process, which holds the links and the servers. Failover is Patroni's: kill-primary
 * crashes the leader's node and Patroni elects the replica; promote asks Patroni for a switchover.
 */
const REGION_OPTIONS = {
  service: {
    type: 'string',
    value: 'S',
    help: 'cut/restore: only the links of this service (postgres, replication, redis, lb, patroni, etcd)',
  },
} as const satisfies OptionSpec;

const NEEDS_REGION: ControlOp[] = ['cut', 'restore', 'promote', 'rejoin'];
const OPS: ControlOp[] = ['cut', 'restore', 'promote', 'rejoin', 'kill-primary', 'status'];

export const regionCommand = defineCommand({
  synopsis: [
    'region cut|restore REGION [--service S]',
    'region kill-primary',
    'region promote|rejoin REGION',
    'region status',
  ],
  about: `Acts on the running two-region simulation (workbench up --phase 4):
  cut REGION       stalls every link into and out of the region (database, Redis, replication, Patroni's
                   REST API and etcd, the entry's route); --service etcd cuts only its Patroni from etcd
  restore REGION   heals them: held bytes go out in order, held connections connect
  kill-primary     crashes the leader's node (its Patroni and Postgres SIGKILLed): Patroni elects the
                   replica once the leader key expires (ttl ${PATRONI_TIMINGS.ttl} s)
  promote REGION   a Patroni switchover to the region's replica (a failover if the leader is down);
                   brokers follow through their database HAProxy, no restart
  rejoin REGION    starts a killed region's Patroni again: it rejoins as a replica (pg_rewind)
  status           Patroni's view of the cluster (members, roles, timelines, lag)
Exit 1 when the simulation refuses (no such region, nothing to promote), 2 on a usage error.`,
  options: REGION_OPTIONS,
  run: runRegionCommand,
});

async function runRegionCommand({ values, positionals }: Parsed<typeof REGION_OPTIONS>): Promise<number> {
  const [action, region, ...extra] = positionals;
  if (!OPS.includes(action as ControlOp))
    throw new UsageError(`unknown region action "${action ?? ''}" (expected ${OPS.join(', ')})`);
  const op = action as ControlOp;
  if (NEEDS_REGION.includes(op) && !region) throw new UsageError(`usage: workbench region ${op} REGION`);
  const unexpected = NEEDS_REGION.includes(op) ? extra[0] : region;
  if (unexpected !== undefined) throw new UsageError(`unexpected argument "${unexpected}"`);
  if (values.service !== undefined && op !== 'cut' && op !== 'restore')
    throw new UsageError('--service is for cut and restore only');
  const cluster = readCluster();
  if (!cluster?.regions)
    throw new Error('no two-region simulation here: start one with "workbench up --phase 4"');
  const result = await callControl(cluster.regions.supervisor.control, {
    op,
    region,
    service: values.service,
  });
  console.log(describe(op, region, values.service, result as Record<string, number | string>));
  return 0;
}

function describe(
  op: ControlOp,
  region: string | undefined,
  service: string | undefined,
  result: Record<string, number | string>,
): string {
  const which = service ? `${service} ` : '';
  switch (op) {
    case 'cut':
      return `region ${region}: ${result.links} ${which}links cut (bytes held, new connections hang)`;
    case 'restore':
      return `region ${region}: ${result.links} ${which}links restored`;
    case 'kill-primary':
      return `region ${result.region}: leader's node crashed (Patroni and Postgres killed); Patroni elects a replica after the leader key's ttl`;
    case 'promote':
      return `region ${region}: Patroni switched the leader over from ${result.from || 'none'} in ${Math.round(Number(result.promotedMs))} ms`;
    case 'rejoin':
      return `region ${region}: rejoined as a replica in ${Math.round(Number(result.rejoinedMs))} ms (timeline ${result.timeline})`;
    case 'status':
      return JSON.stringify(result, null, 2);
  }
}
