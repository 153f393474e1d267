import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderFlagsDocument } from '../../flags/document.js';
import { publishRefresh, refreshChannel } from '../../flags/refresh-bus.js';
import { defaultFlagValues } from '../../flags/registry.js';
import { runWorkbench } from '../helpers/cli.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { freePort } from '../helpers/ports.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { startUnleash, type TestUnleash } from '../helpers/unleash.js';
import { waitFor } from '../helpers/wait.js';

const ENV = 'canary';
let db: TestDatabase;
let unleash: TestUnleash;
let dir: string;
let stateDir: string;
const prefix = `wbtest:${randomBytes(4).toString('hex')}:`;
const nodes: InProcessNode[] = [];

interface Report {
  source: string;
  error: string | null;
  flags: Record<string, { value: boolean; acting: boolean }>;
}
const report = async (node: InProcessNode) => (await (await fetch(`${node.url}/flags`)).json()) as Report;

beforeAll(async () => {
  [db, unleash] = await Promise.all([createTestDatabase('unleash_flags'), startUnleash()]);
  dir = mkdtempSync(join(tmpdir(), 'wb-unleash-flags-'));
  stateDir = mkdtempSync(join(tmpdir(), 'wb-unleash-state-'));
  // The environment's file is the bootstrap: ha.audit starts on before Unleash has said anything.
  writeFileSync(join(dir, `${ENV}.json`), renderFlagsDocument({ ...defaultFlagValues(), 'ha.audit': true }));
}, 120_000);
afterAll(async () => {
  await Promise.all(nodes.map((n) => n.stop()));
  await unleash?.stop();
  await db?.drop();
  rmSync(dir, { recursive: true, force: true });
  rmSync(stateDir, { recursive: true, force: true });
});

function unleashNode(id: string, url: string) {
  return startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: {
      NODE_ID: id,
      FLAGS_PROVIDER: 'unleash',
      UNLEASH_URL: `${url}/api`,
      // Long enough that a change arriving within seconds arrived by push, not by the poll.
      UNLEASH_REFRESH_MS: '60000',
      FLAGS_ENV: ENV,
      FLAGS_DIR: dir,
      STATE_DIR: stateDir,
      REDIS_KEY_PREFIX: prefix,
    },
  });
}

describe('flags from a real unleash-server 8.2.0', () => {
  it('starts on the bootstrap values, and says so, when Unleash is unreachable', async () => {
    const node = await unleashNode('u-offline', `http://127.0.0.1:${await freePort()}`);
    try {
      const r = await report(node);
      expect(r.source).toBe('bootstrap');
      expect(r.error).toBeTruthy();
      expect(r.flags['ha.audit']).toMatchObject({ value: true, acting: true });
      expect(r.flags['ha.rate-limits']).toMatchObject({ value: false, acting: false });
    } finally {
      await node.stop();
    }
  });

  it('switches nodes without a restart when `workbench flags set` flips a flag in Unleash', async () => {
    nodes.push(...(await Promise.all(['u1', 'u2', 'u3'].map((id) => unleashNode(id, unleash.url)))));
    await waitFor(async () => (await Promise.all(nodes.map(report))).every((r) => r.source === 'unleash'));
    // Unleash does not define ha.audit (yet): the environment's file still decides it.
    expect((await report(nodes[0]!)).flags['ha.audit']!.acting).toBe(true);
    const cli = ['--env', ENV, '--provider', 'unleash', '--unleash-url', unleash.url];
    const env = { DATABASE_URL: db.url, REDIS_KEY_PREFIX: prefix };
    // Listen to the push as a node would, to time the change from the moment the CLI announces it.
    const listener = new Redis('redis://127.0.0.1:6379');
    let pushedAt = 0;
    listener.on('message', () => {
      pushedAt = Date.now();
    });
    await listener.subscribe(refreshChannel(prefix, ENV));
    try {
      const started = Date.now();
      const set = await runWorkbench(['flags', 'set', 'ha.rate-limits', 'on', ...cli], env);
      expect(set.code).toBe(0);
      expect(set.stdout).toContain('pushed to 4 subscribers'); // three nodes and this test's listener
      await waitFor(
        async () => (await Promise.all(nodes.map(report))).every((r) => r.flags['ha.rate-limits']!.acting),
        { intervalMs: 5 },
      );
      const now = Date.now();
      console.log(
        `unleash flag convergence over 3 nodes: push → every node acting ${now - pushedAt} ms; CLI start → every node acting ${now - started} ms`,
      );
      expect(now - pushedAt).toBeLessThan(5000);
    } finally {
      listener.disconnect();
    }
    const listed = await runWorkbench(['flags', 'list', ...cli, '--json'], env);
    const flag = JSON.parse(listed.stdout).flags.find((f: { flag: string }) => f.flag === 'ha.rate-limits');
    expect(flag).toMatchObject({ desired: true, disagree: false });
    expect(existsSync(join(stateDir, 'unleash', 'u1', 'unleash-backup-mesh-broker.json'))).toBe(true);
  });

  it('makes a per-node canary with a strategy on nodeId', async () => {
    const base = `${unleash.url}/api/admin/projects/default/features`;
    const post = (path: string, body?: unknown) =>
      fetch(`${base}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    expect((await post('', { name: 'ha.audit', type: 'release' })).ok).toBe(true);
    const strategy = await post('/ha.audit/environments/development/strategies', {
      name: 'flexibleRollout',
      parameters: { rollout: '100', stickiness: 'default', groupId: 'ha.audit' },
      constraints: [{ contextName: 'userId', operator: 'IN', values: ['u2'] }],
    });
    expect(strategy.ok).toBe(true);
    expect((await post('/ha.audit/environments/development/on')).ok).toBe(true);
    // Changed in Unleash directly, then announced as `flags set` would: only u2 is in the canary.
    const publisher = new Redis('redis://127.0.0.1:6379');
    await publishRefresh(publisher, prefix, ENV, { flag: 'ha.audit' });
    publisher.disconnect();
    const acting = async () => (await Promise.all(nodes.map(report))).map((r) => r.flags['ha.audit']!.acting);
    await waitFor(async () => (await acting()).join() === 'false,true,false', { timeoutMs: 10_000 });
    expect(await acting()).toEqual([false, true, false]);
  });
});
