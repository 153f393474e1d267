/**
 * Contract of `Regions` (broker/regions/regions.ts), against LocalRegions (`ha.regions` off) and
 * SharedRegions (on), on a real Postgres database: `read` serves a list read from the implementation's pool
 * and counts it; `defers` steers only who tries a mesh's work. Driven below the node, as the row's contract
 * is about pools and the nodes table: which pool served a read is told by the server itself (each pool has
 * its own `application_name`), and the nodes and presence rows are the ones heartbeats and hellos write.
 * The end-to-end behaviour (a real replica, two regions, flips under traffic) is tests/integration/regions.test.ts.
 * Both implementations behind one Switch are flipped there and back twice under a stream of reads.
 */
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool, type Pool } from '../../broker/db/pool.js';
import type { AuthorityWork, Regions } from '../../broker/regions/regions.js';
import { LocalRegions } from '../../broker/regions/regions.local.js';
import { SharedRegions } from '../../broker/regions/regions.shared.js';
import { Switch } from '../../broker/rows/switch.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

const NODE_DEAD_MS = 1500;
const log = pino({ level: 'silent' });

let db: TestDatabase;
let primary: Pool;
let reads: Pool;

beforeAll(async () => {
  db = await createTestDatabase('contract_regions');
  primary = createPool(db.url, { applicationName: 'contract-primary' });
  reads = createPool(db.url, { applicationName: 'contract-reads' });
});

afterAll(async () => {
  await primary?.end();
  await reads?.end();
  await db?.drop();
});

interface Built {
  regions: Regions;
  counted: string[];
  /** The application_name the implementation's list reads run under. */
  readsOn: string;
  /** Whether the implementation defers to a live home region at all. */
  followsHomes: boolean;
  refresh(): Promise<void>;
}

function build(kind: 'local' | 'shared', region = 'a'): Built {
  const counted: string[] = [];
  if (kind === 'local') {
    const regions = new LocalRegions(primary, () => counted.push('primary'));
    return { regions, counted, readsOn: 'contract-primary', followsHomes: false, refresh: async () => {} };
  }
  const regions = new SharedRegions({
    primary,
    reads,
    counted: () => counted.push('replica'),
    region,
    primaryRegion: 'a',
    nodeDeadMs: NODE_DEAD_MS,
    refreshMs: 60_000, // refreshed by hand below
    log,
  });
  return {
    regions,
    counted,
    readsOn: 'contract-reads',
    followsHomes: true,
    refresh: () => regions.refresh(),
  };
}

async function node(id: string, region: string | null, alive = true): Promise<void> {
  await db.query(
    `INSERT INTO nodes (id, url, heartbeat_at, stopped_at, region) VALUES ($1, 'http://x', now(), $2, $3)
     ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), stopped_at = excluded.stopped_at, region = excluded.region`,
    [id, alive ? null : new Date(), region],
  );
}

async function mesh(homeRegion: string | null): Promise<string> {
  const result = await db.query<{ id: string }>(
    'INSERT INTO meshes (name, home_region) VALUES ($1, $2) RETURNING id',
    [`m-${randomUUID()}`, homeRegion],
  );
  return result.rows[0]!.id;
}

async function session(meshId: string, nodeId: string): Promise<void> {
  const member = await db.query<{ id: number }>(
    `INSERT INTO members (mesh_id, pubkey) VALUES ($1, $2) RETURNING id`,
    [meshId, randomUUID().replaceAll('-', '').padEnd(64, '0')],
  );
  await db.query('INSERT INTO presence (session_id, mesh_id, member_id, node_id) VALUES ($1, $2, $3, $4)', [
    randomUUID(),
    meshId,
    member.rows[0]!.id,
    nodeId,
  ]);
}

const both = async (regions: Regions, meshId: string) =>
  Object.fromEntries(
    await Promise.all(
      (['clock', 'background'] as AuthorityWork[]).map(async (work) => [
        work,
        await regions.defers(meshId, work),
      ]),
    ),
  );

describe.each(['local', 'shared'] as const)('Regions contract, %s', (kind) => {
  it('serves a list read from its pool, and counts each read by pool', async () => {
    const { regions, counted, readsOn } = build(kind);
    await regions.activate(true);
    const result = await regions.read<{ name: string }>('SELECT current_setting($1) AS name', [
      'application_name',
    ]);
    expect(result.rows[0]!.name).toBe(readsOn);
    expect(counted).toEqual([kind === 'local' ? 'primary' : 'replica']);
    await regions.deactivate();
  });

  it('defers a mesh homed in another region only while a node there is alive (clock: with a session there)', async () => {
    const { regions, refresh, followsHomes } = build(kind, 'a');
    const homedInB = await mesh('b');
    const homedHere = await mesh('a');
    const unhomed = await mesh(null); // the primary's region: a
    const nodeB = `b-${randomUUID()}`;
    await node(`a-${randomUUID()}`, 'a');
    await node(nodeB, 'b');
    await regions.activate(true);
    await refresh();
    expect(await both(regions, homedInB)).toEqual({ clock: false, background: followsHomes });
    expect(await both(regions, homedHere)).toEqual({ clock: false, background: false });
    expect(await both(regions, unhomed)).toEqual({ clock: false, background: false });
    await session(homedInB, nodeB);
    await refresh();
    expect(await both(regions, homedInB)).toEqual({ clock: followsHomes, background: followsHomes });
    // (Other tests' meshes may be deferred too: the database is the file's.)
    const deferred = await regions.deferred('background');
    expect(deferred.includes(homedInB)).toBe(followsHomes);
    expect(deferred).not.toContain(homedHere);
    expect(deferred).not.toContain(unhomed);
    if (!followsHomes) expect(deferred).toEqual([]);
    // Region b's node stops: availability first, region a takes the mesh's work.
    await node(nodeB, 'b', false);
    await refresh();
    expect(await both(regions, homedInB)).toEqual({ clock: false, background: false });
    // A node of region b seeing the same mesh: its own home, never deferred.
    const inB = build(kind, 'b');
    await inB.regions.activate(true);
    expect(await both(inB.regions, homedInB)).toEqual({ clock: false, background: false });
    await inB.regions.deactivate();
    await regions.deactivate();
  });

  it('a deactivated implementation defers nothing (the other side decides from then on)', async () => {
    const { regions, refresh } = build(kind, 'a');
    const homedInC = await mesh('c');
    await node(`c-${randomUUID()}`, 'c');
    await regions.activate(true);
    await refresh();
    await regions.deactivate();
    expect(await regions.defers(homedInC, 'background')).toBe(false);
  });
});

describe('Regions behind the row switch', () => {
  it('flips there and back twice under a stream of reads: every read answered, each by the side in use', async () => {
    const local = build('local');
    const shared = build('shared');
    const rowSwitch = new Switch<Regions>({
      flag: 'ha.regions',
      local: local.regions,
      shared: shared.regions,
      log,
    });
    await rowSwitch.select('local');
    let stop = false;
    const answers: string[] = [];
    const stream = (async () => {
      while (!stop) {
        const result = await rowSwitch.view.read<{ name: string }>('SELECT current_setting($1) AS name', [
          'application_name',
        ]);
        answers.push(result.rows[0]!.name);
      }
    })();
    for (const target of ['shared', 'local', 'shared', 'local'] as const) {
      // A few reads answered by the side in use before each move.
      const answered = answers.length;
      await waitFor(() => answers.length >= answered + 5, { what: 'reads between two moves' });
      await rowSwitch.select(target);
    }
    stop = true;
    await stream;
    await rowSwitch.close();
    expect(new Set(answers)).toEqual(new Set(['contract-primary', 'contract-reads']));
    expect(local.counted.length + shared.counted.length).toBe(answers.length);
    expect(shared.counted.length).toBe(answers.filter((name) => name === 'contract-reads').length);
  });
});
