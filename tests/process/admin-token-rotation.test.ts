/**
 * Rotating the admin token without downtime (docs/runbooks/rotate-admin-token.md), on real broker
 * processes over HTTP: during the rotation a node accepts the new ADMIN_TOKEN and the retiring
 * ADMIN_TOKEN_PREVIOUS, counts and logs every use of the old one, and refuses anything else; restarted
 * without the previous token it refuses the old one. A bad previous token stops the node naming it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminOf } from '../helpers/broker.js';
import { type NodeProcess, runWorkbench } from '../helpers/cli.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

const OLD_TOKEN = 'old-admin-token-0123456789abcdef';
const NEW_TOKEN = 'new-admin-token-fedcba9876543210';

let db: TestDatabase;
const nodes: NodeProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase('admin_token_rotation');
});
afterAll(async () => {
  for (const node of nodes) if (node.process.exitCode === null) node.process.kill('SIGKILL');
  await db?.drop();
});

async function broker(env: Record<string, string>): Promise<NodeProcess> {
  const node = await startNode({ kind: 'process', databaseUrl: db.url, env });
  nodes.push(node);
  return node;
}

async function drain(node: NodeProcess): Promise<void> {
  node.process.kill('SIGTERM');
  expect(await node.exited).toBe(0);
}

const status = (node: NodeProcess, token: string | null) =>
  adminOf(node.url)
    .admin('/admin/meshes', { token })
    .then((r) => r.status);

const previousUses = async (node: NodeProcess) => {
  const text = await (await fetch(`${node.url}/metrics`)).text();
  return Number(text.match(/^mesh_broker_admin_previous_token_uses_total\{[^}]*\} (\d+)$/m)?.[1]);
};

describe('admin token rotation on a broker process', () => {
  it('accepts both tokens during the rotation, counts the old one, and refuses it once dropped', async () => {
    // Before: the old token only.
    const before = await broker({ NODE_ID: 'rotate-before', ADMIN_TOKEN: OLD_TOKEN });
    const created = await adminOf(before.url).admin('/admin/meshes', {
      body: { name: 'kept-across-the-rotation' },
      token: OLD_TOKEN,
    });
    expect(created.status).toBe(201);
    expect(await status(before, NEW_TOKEN)).toBe(401);
    await drain(before);

    // During: the new token, and the old one as the previous.
    const during = await broker({
      NODE_ID: 'rotate-during',
      ADMIN_TOKEN: NEW_TOKEN,
      ADMIN_TOKEN_PREVIOUS: OLD_TOKEN,
    });
    await waitFor(() => during.output().includes('ADMIN_TOKEN_PREVIOUS is set'), {
      what: `the warning about ADMIN_TOKEN_PREVIOUS\n${during.output()}`,
    });
    expect(await previousUses(during)).toBe(0);
    expect(await status(during, NEW_TOKEN)).toBe(200);
    expect(await previousUses(during)).toBe(0);
    const listed = await adminOf(during.url).admin('/admin/meshes', { token: OLD_TOKEN });
    expect(listed.status).toBe(200);
    expect(JSON.stringify(await listed.json())).toContain('kept-across-the-rotation');
    expect(await previousUses(during)).toBe(1);
    await waitFor(() => during.output().includes('admin request authorised by ADMIN_TOKEN_PREVIOUS'), {
      timeoutMs: 5000,
      what: 'the use of the old token logged',
    });
    const warning = during
      .output()
      .split('\n')
      .find((line) => line.includes('ADMIN_TOKEN_PREVIOUS: switch'));
    expect(JSON.parse(warning!)).toMatchObject({ level: 40, method: 'GET', url: '/admin/meshes' });
    // Anything else is still refused, and refusals are not counted as uses of the old token.
    for (const wrong of [null, '', OLD_TOKEN.slice(0, -1), `${NEW_TOKEN}x`, 'x'.repeat(NEW_TOKEN.length)]) {
      expect(await status(during, wrong), `token ${JSON.stringify(wrong)}`).toBe(401);
    }
    expect(await previousUses(during)).toBe(1);
    await drain(during);

    // After: the previous token dropped.
    const after = await broker({ NODE_ID: 'rotate-after', ADMIN_TOKEN: NEW_TOKEN });
    expect(after.output()).not.toContain('ADMIN_TOKEN_PREVIOUS is set');
    expect(await status(after, OLD_TOKEN)).toBe(401);
    expect(await status(after, NEW_TOKEN)).toBe(200);
    expect(await previousUses(after)).toBe(0);
    await drain(after);
  }, 90_000);

  it.each([
    ['too short', 'short-token', 'must be at least 16 characters'],
    ['the same as ADMIN_TOKEN', NEW_TOKEN, 'is the same as ADMIN_TOKEN'],
  ])(
    'a previous token %s stops the node naming the variable',
    async (_case, previous, text) => {
      const result = await runWorkbench(['broker'], {
        DATABASE_URL: db.url,
        PORT: '0',
        ADMIN_TOKEN: NEW_TOKEN,
        ADMIN_TOKEN_PREVIOUS: previous,
      });
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(`ADMIN_TOKEN_PREVIOUS: ${text}`);
    },
    30_000,
  );
});
