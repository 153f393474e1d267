/**
 * Shadow mode per row (docs/flags.md § Shadow, issue 27 item 3) through a real node, real WebSocket peers,
 * real Postgres and Redis: with `ha.presence`, `ha.connection-cap` and `ha.rate-limits` at "shadow", the
 * node serves from the local implementations, each call they answer is compared with the shared one, every
 * comparison agrees, and the shadow copy is written under `shadow:` only (the live shared keys untouched).
 * With the planted divergence on (plant `shadow-divergence`), every comparison is a counted mismatch. An
 * unknown value changes nothing.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { armPlant } from '../../broker/plants.js';
import type { ShadowReport } from '../../broker/shadow/runner.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

const { Client } = pg;
const SHADOWED = ['ha.presence', 'ha.connection-cap', 'ha.rate-limits', 'ha.schedules'] as const;

let db: TestDatabase;
let dir: string;
let redis: Redis;
const prefix = `wbtest:shadow:${randomBytes(4).toString('hex')}:`;

function writeFlags(flags: Record<string, unknown>): void {
  writeFileSync(join(dir, 'shadow.json'), `${JSON.stringify({ flags })}\n`);
}

const allShadow = () => Object.fromEntries(SHADOWED.map((flag) => [flag, 'shadow']));

function start(env: Record<string, string> = {}): Promise<InProcessNode> {
  return startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: {
      FLAGS_DIR: dir,
      FLAGS_ENV: 'shadow',
      FLAGS_POLL_MS: '200',
      REDIS_KEY_PREFIX: prefix,
      SEND_BURST: '100000',
      SEND_RATE_PER_MIN: '1000000',
      ...env,
    },
  });
}

async function shadowRows(node: InProcessNode): Promise<Record<string, ShadowReport>> {
  const response = await node.admin('/admin/shadow');
  expect(response.status).toBe(200);
  const { rows } = (await response.json()) as { rows: ShadowReport[] };
  return Object.fromEntries(rows.map((row) => [row.flag, row]));
}

/**
 * Two peers connect (two admissions), list the mesh three times, send five messages (five consumes), make
 * two schedules due within the comparator's horizon and cancel one (three due-set comparisons).
 */
async function traffic(node: InProcessNode) {
  const mesh = await createMesh(node, 2);
  const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
  await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
  for (let i = 0; i < 3; i++) expect((await a.peers()).length).toBe(2);
  for (let i = 0; i < 5; i++) await a.send(mesh.members[1]!.pubkey, `m${i}`);
  const schedule = () =>
    a.request<{ type: 'schedule.created'; scheduleId: string }>({
      type: 'schedule.create',
      to: mesh.members[1]!.pubkey,
      body: 'later',
      at: Date.now() + 40_000,
    });
  const kept = await schedule();
  const cancelled = await schedule();
  await a.request({ type: 'schedule.cancel', scheduleId: cancelled.scheduleId });
  return { a, mesh, kept, schedule };
}

/** The comparisons `traffic` makes, per flag, at least. */
const EXPECTED: Record<(typeof SHADOWED)[number], number> = {
  'ha.presence': 3,
  'ha.connection-cap': 2,
  'ha.rate-limits': 5,
  'ha.schedules': 3,
};

async function compared(node: InProcessNode) {
  return waitFor(
    async () => {
      const rows = await shadowRows(node);
      const done = SHADOWED.every((flag) => {
        const row = rows[flag];
        return row && row.agree + row.disagree + row.error >= EXPECTED[flag];
      });
      return done ? rows : undefined;
    },
    { timeoutMs: 10_000, what: 'the shadow comparisons of the traffic' },
  );
}

beforeAll(async () => {
  db = await createTestDatabase('shadow');
  dir = mkdtempSync(join(tmpdir(), 'wb-shadow-'));
  redis = new Redis('redis://127.0.0.1:6379');
});
afterEach(closeAllClients);
afterAll(async () => {
  armPlant(undefined);
  const keys = await redis.keys(`${prefix}*`);
  if (keys.length > 0) await redis.del(...keys);
  redis.disconnect();
  rmSync(dir, { recursive: true, force: true });
  await db?.drop();
});

describe('shadow mode', () => {
  it('serves locally, compares every answer, agrees, and writes only the shadow copy', async () => {
    writeFlags(allShadow());
    const node = await start();
    try {
      const report = (await (await fetch(`${node.url}/flags`)).json()) as {
        flags: Record<string, { mode: string; acting: boolean }>;
      };
      for (const flag of SHADOWED)
        expect(report.flags[flag]).toMatchObject({ mode: 'shadow', acting: false });
      const { kept, schedule } = await traffic(node);
      const rows = await compared(node);
      for (const flag of SHADOWED) {
        expect(rows[flag], flag).toMatchObject({ running: true, disagree: 0, error: 0, mismatches: [] });
        expect(rows[flag]!.agreementRatio, flag).toBe(1);
      }
      const metrics = await (await fetch(`${node.url}/metrics`)).text();
      expect(metrics).toMatch(
        /mesh_broker_shadow_comparisons_total\{flag="ha.presence",outcome="agree"[^}]*\} [3-9]/,
      );
      // The copy lives under shadow: keys; the live shared keys of the cap and the limits were never written.
      expect(await redis.keys(`${prefix}shadow:cap:*`)).not.toEqual([]);
      expect(await redis.keys(`${prefix}cap:*`)).toEqual([]);
      expect(
        (await redis.keys(`${prefix}*`)).filter(
          (key) => !key.startsWith(`${prefix}shadow:`) && /cap|rlflx/.test(key),
        ),
      ).toEqual([]);

      // The local gap, seen: a cancel made on another node (here, straight in Postgres) never reaches this
      // node's timer, so the next comparison finds the schedule armed here and not due for the shared side.
      const pg = new Client({ connectionString: db.url });
      await pg.connect();
      await pg.query('UPDATE schedules SET cancelled_at = now() WHERE id = $1', [kept.scheduleId]);
      await pg.end();
      await schedule();
      const gap = await waitFor(
        async () => {
          const row = (await shadowRows(node))['ha.schedules']!;
          return row.disagree > 0 ? row : undefined;
        },
        { what: 'the lost cancel seen' },
      );
      const [mismatch] = gap.mismatches;
      expect(mismatch!.local as string[]).toContain(kept.scheduleId);
      expect(mismatch!.shared as string[]).not.toContain(kept.scheduleId);

      // An unknown value is a clear error and changes nothing: the rows stay in shadow.
      writeFlags({ ...allShadow(), 'ha.presence': 'shadw' });
      await waitFor(
        async () => {
          const flags = (await (await fetch(`${node.url}/flags`)).json()) as { error: string | null };
          return flags.error?.includes('"ha.presence" must be true, false or "shadow"');
        },
        { what: 'the bad value reported' },
      );
      expect((await shadowRows(node))['ha.presence']!.running).toBe(true);

      // Off again: comparisons stop.
      writeFlags({});
      await waitFor(async () => !(await shadowRows(node))['ha.presence']!.running, { what: 'shadow off' });
    } finally {
      await node.stop();
    }
  }, 60_000);

  it('catches the planted divergence in every comparison of every row', async () => {
    writeFlags(allShadow());
    const node = await start({ WORKBENCH_TEST_PLANTS: '1', WORKBENCH_PLANT: 'shadow-divergence' });
    try {
      await traffic(node);
      const rows = await compared(node);
      for (const flag of SHADOWED) {
        const row = rows[flag]!;
        expect(row.agree, flag).toBe(0);
        expect(row.disagree, flag).toBeGreaterThanOrEqual(EXPECTED[flag]);
        expect(row.mismatches.length, flag).toBe(Math.min(row.disagree, 50));
        expect(row.mismatches[0], flag).toMatchObject({ outcome: 'disagree' });
      }
      const metrics = await (await fetch(`${node.url}/metrics`)).text();
      expect(metrics).toMatch(
        /mesh_broker_shadow_comparisons_total\{flag="ha.rate-limits",outcome="disagree"/,
      );
    } finally {
      await node.stop();
      armPlant(undefined);
    }
  }, 60_000);
});
