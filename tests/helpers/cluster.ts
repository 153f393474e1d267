import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateMemberKeys } from '@mesh-broker/sdk';
import { FAST_CLUSTER } from '../../cli/cluster/fast-timings.js';
import { renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues, FLAG_KEYS, type FlagKey, phasePreset } from '../../flags/registry.js';
import type { NodeProcess } from './cli.js';
import type { TestMesh } from './mesh.js';
import { ADMIN_TOKEN, startNode } from './nodes.js';
import { waitFor } from './wait.js';

/** Shared with `workbench chaos` (cli/cluster/fast-timings.ts). */
export { FAST_CLUSTER };

/**
 * The fast timings, for the tests that judge every smoke check's verdict (smoke, promote): a Redis call
 * may take up to a second before a shared row falls back to the node's memory. With the default 250 ms, a
 * node whose event loop stalls that long (CI runs these beside two other cluster tests on two cores) served
 * a few admissions locally and the cap check saw the gap of the local cap. The fallback itself is tested
 * where it is the subject (tests/cluster/ha-failures.test.ts, tests/integration/rate-limits-shared.test.ts, chaos).
 */
export const SMOKE_CLUSTER = { ...FAST_CLUSTER, REDIS_TIMEOUT_MS: '1000' };

/** The rows HA part 1 (issue 5) made shareable: the flags the part-1 cluster tests turn on and off. */
export const HA_PART1_FLAGS: FlagKey[] = [
  'ha.presence',
  'ha.delivery',
  'ha.connection-cap',
  'ha.rate-limits',
  'ha.streams',
  'ha.mcp',
  'ha.clock',
];

/** The shipped phase-3 preset (every row shared, the active lease on): what the HA tests of phase 3 run. */
export const PHASE3_FLAGS: FlagKey[] = FLAG_KEYS.filter((key) => phasePreset(3)[key]);

/**
 * Broker processes sharing one database and one Redis prefix (one cluster), each in a flags environment
 * whose file the test controls. Nodes of different environments in one cluster make a mixed cluster.
 * Its nodes are the one fixture's process nodes (tests/helpers/nodes.ts `startNode`).
 */
export class TestCluster {
  readonly nodes = new Map<string, NodeProcess>();
  readonly flagsDir = mkdtempSync(join(tmpdir(), 'wb-cluster-flags-'));
  readonly prefix = `wbtest:${randomBytes(4).toString('hex')}:`;

  constructor(
    readonly databaseUrl: string,
    private readonly env: Record<string, string> = {},
  ) {}

  setFlags(environment: string, on: FlagKey[]): void {
    const values = defaultFlagValues();
    for (const key of on) values[key] = true;
    writeFileSync(join(this.flagsDir, `${environment}.json`), renderFlagsDocument(values));
  }

  async start(nodeId: string, environment: string, env: Record<string, string> = {}): Promise<NodeProcess> {
    const node = await startNode({
      kind: 'process',
      databaseUrl: this.databaseUrl,
      env: {
        ...FAST_CLUSTER,
        ...this.env,
        NODE_ID: nodeId,
        FLAGS_DIR: this.flagsDir,
        FLAGS_ENV: environment,
        REDIS_KEY_PREFIX: this.prefix,
        ...env,
      },
    });
    this.nodes.set(nodeId, node);
    return node;
  }

  node(id: string): NodeProcess {
    const node = this.nodes.get(id);
    if (!node) throw new Error(`no node ${id}`);
    return node;
  }

  /** Waits until the node acts on exactly these flags (shared implementation in use). */
  async waitActing(nodeId: string, expected: Partial<Record<FlagKey, boolean>>): Promise<void> {
    await waitFor(
      async () => {
        const report = (await (await fetch(`${this.node(nodeId).url}/flags`)).json()) as {
          flags: Record<string, { acting: boolean }>;
        };
        return Object.entries(expected).every(([flag, on]) => report.flags[flag]?.acting === on);
      },
      { timeoutMs: 10_000, what: `${nodeId} acting on ${JSON.stringify(expected)}` },
    );
  }

  async createMesh(count: number, via = [...this.nodes.values()][0]!): Promise<TestMesh> {
    const call = async (path: string, body: unknown) => {
      const response = await fetch(`${via.url}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
      return (await response.json()) as Record<string, string>;
    };
    const { meshId } = await call('/admin/meshes', { name: `cluster-${randomBytes(4).toString('hex')}` });
    const members = Array.from({ length: count }, () => generateMemberKeys());
    for (const member of members) await call(`/admin/meshes/${meshId}/members`, { pubkey: member.pubkey });
    return { meshId: meshId!, members };
  }

  kill(nodeId: string, signal: NodeJS.Signals = 'SIGKILL'): Promise<number | string | null> {
    return this.node(nodeId).kill(signal);
  }

  async stop(): Promise<void> {
    for (const node of this.nodes.values()) if (node.process.exitCode === null) node.process.kill('SIGKILL');
    await Promise.all([...this.nodes.values()].map((n) => n.exited));
    rmSync(this.flagsDir, { recursive: true, force: true });
  }
}
