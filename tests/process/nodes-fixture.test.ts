/**
 * The one node fixture (tests/helpers/nodes.ts, issue 29 item 4): both kinds answer the same interface
 * (url, wsUrl, admin, stop, waitForSwitch) and `startNodes` makes one cluster (one Redis prefix, distinct
 * node ids); a process node can also be killed. Needs `npm run build` (the process kind).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FAST_CLUSTER } from '../../cli/cluster/fast-timings.js';
import { renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues } from '../../flags/registry.js';
import { type NodeKind, startNodes, type TestNodeOf } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

const FLAGS_ENV = 'fixture';

describe.each<NodeKind>(['in-process', 'process'])('startNodes (%s)', (kind) => {
  let db: TestDatabase;
  let flagsDir: string;
  let nodes: Array<TestNodeOf<NodeKind>> = [];
  const writeFlags = (presenceShared: boolean) => {
    const values = { ...defaultFlagValues(), 'ha.presence': presenceShared };
    const temporary = join(flagsDir, `.${FLAGS_ENV}.${randomBytes(3).toString('hex')}`);
    writeFileSync(temporary, renderFlagsDocument(values));
    renameSync(temporary, join(flagsDir, `${FLAGS_ENV}.json`)); // atomic: never a half-written file
  };

  beforeAll(async () => {
    db = await createTestDatabase(`fixture_${kind.replace('-', '_')}`);
    flagsDir = mkdtempSync(join(tmpdir(), 'wb-fixture-flags-'));
    writeFlags(false);
    nodes = await startNodes({
      kind,
      count: 2,
      databaseUrl: db.url,
      idPrefix: `fixture-${kind}`,
      env: { ...FAST_CLUSTER, FLAGS_DIR: flagsDir, FLAGS_ENV },
    });
  }, 60_000);
  afterAll(async () => {
    for (const node of nodes) await node.stop().catch(() => {});
    await db?.drop().catch(() => {});
    if (flagsDir) rmSync(flagsDir, { recursive: true, force: true });
  }, 60_000);

  it('starts nodes of one interface, distinct ids, their admin API behind the test token', async () => {
    expect(nodes.map((node) => [node.kind, node.nodeId])).toEqual([
      [kind, `fixture-${kind}-0`],
      [kind, `fixture-${kind}-1`],
    ]);
    for (const node of nodes) {
      expect(node.wsUrl).toBe(`${node.url.replace(/^http/, 'ws')}/ws`);
      const health = (await (await fetch(`${node.url}/health`)).json()) as { node: string };
      expect(health.node).toBe(node.nodeId);
      expect(
        (await node.admin('/admin/meshes', { body: { name: `fixture-${node.nodeId}` } })).status,
      ).toBeLessThan(300);
      expect((await node.admin('/admin/meshes', { token: null })).status).toBe(401);
    }
  });

  it('waitForSwitch resolves once every node acts on a flipped flag', async () => {
    const landed = nodes.map((node) => node.waitForSwitch('ha.presence', 'shared', 10_000));
    writeFlags(true);
    await Promise.all(landed);
    for (const node of nodes) {
      const report = (await (await fetch(`${node.url}/flags`)).json()) as {
        flags: Record<string, { acting: boolean }>;
      };
      expect(report.flags['ha.presence']?.acting).toBe(true);
    }
  });

  it('waitForSwitch rejects when the node never switches', async () => {
    await expect(nodes[0]!.waitForSwitch('ha.streams', 'shared', 300)).rejects.toThrow(
      /ha\.streams|log line/,
    );
  });

  it.runIf(kind === 'process')('a process node can be killed: it exits by SIGKILL', async () => {
    const node = nodes[1]!;
    if (node.kind !== 'process') throw new Error('not a process node');
    expect(await node.kill()).toBe('SIGKILL');
  });
});
