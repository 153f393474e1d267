/**
 * `workbench restart --rolling` on a phase-3 `workbench up` (three brokers behind HAProxy, every row
 * shared), under 200 sessions connected through the load balancer with DM traffic: every session resumed
 * (each reconnect's welcome says `resumed`), every acknowledged DM delivered, `peers.list` lists each
 * session once, no `peer.left` at all, and the Postgres work per resumed session counted (pg_stat_database
 * `xact_commit` of the cluster's database: pg_stat_statements is not loaded and the broker has no query
 * counter of its own). Then the bad calls (exit 2) and a node that does not come back (exit 1, named).
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MeshClient } from '@mesh-broker/sdk';
import { afterAll, describe, expect, it } from 'vitest';
import { SessionFleet } from '../../bench/lib/session-fleet.js';
import type { ClusterFile } from '../../cli/cluster/local.js';
import { createLoadMeshes } from '../../cli/load/setup.js';
import { runWorkbench, WORKBENCH } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { pause, waitFor } from '../helpers/wait.js';

const SESSIONS = 200;
const MESHES = 4;
const ENV = { HEARTBEAT_MS: '500', SEND_BURST: '100000', SEND_RATE_PER_MIN: '1000000' };

let cwd: string;
let db: TestDatabase;
let cluster: ClusterFile;
const fleets: SessionFleet[] = [];

afterAll(async () => {
  for (const fleet of fleets) fleet.close();
  if (cwd) {
    await runWorkbench(['down'], {}, cwd);
    rmSync(cwd, { recursive: true, force: true });
  }
  await db?.drop();
});

async function upPhase3(): Promise<void> {
  db = await createTestDatabase('rolling_restart');
  cwd = mkdtempSync(join(tmpdir(), 'wb-roll-'));
  const result = await runWorkbench(
    ['up', '--phase', '3', '--port', '0', '--database-url', db.url],
    ENV,
    cwd,
  );
  expect(result.code, result.stderr).toBe(0);
  cluster = JSON.parse(readFileSync(join(cwd, '.workbench', 'cluster.json'), 'utf8')) as ClusterFile;
}

/** cluster.json as it is now (a restart records each node's new pid). */
function current(): ClusterFile {
  return JSON.parse(readFileSync(join(cwd, '.workbench', 'cluster.json'), 'utf8')) as ClusterFile;
}

/** Transactions committed on the cluster's database so far (the statistics flush within a second). */
async function commits(): Promise<number> {
  await pause(1200, 'pg_stat_database is flushed by each backend at most once a second');
  await db.query('SELECT pg_stat_clear_snapshot()');
  const { rows } = await db.query<{ n: string }>(
    'SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()',
  );
  return Number(rows[0]!.n);
}

/** Commits per second with the fleet connected and the same traffic, but no restart. */
async function backgroundRate(windowMs: number): Promise<number> {
  const start = await commits();
  const t0 = Date.now();
  await pause(windowMs, 'a window of ordinary work to subtract from the roll');
  const end = await commits();
  // Each commits() read itself waits 1.2 s, so the window is measured between the two reads.
  return (end - start) / ((Date.now() - t0) / 1000);
}

describe('workbench restart --rolling (phase 3, through the load balancer)', () => {
  it(`restarts every node under ${SESSIONS} sessions with DM traffic: all resumed, nothing lost, no ghost, no peer.left`, async () => {
    await upPhase3();
    const plans = await createLoadMeshes(
      { url: cluster.lb.url, token: cluster.adminToken },
      { peers: SESSIONS, meshes: MESHES },
    );
    const fleet = new SessionFleet(plans);
    fleets.push(fleet);
    await fleet.connect(`${cluster.lb.url.replace('http', 'ws')}/ws`);
    const traffic = fleet.traffic({ perSecond: 40 });
    const rate = await backgroundRate(3000);
    const before = await commits();
    const t0 = Date.now();
    const roll = await runWorkbench(['restart', '--rolling', '--json'], ENV, cwd, { timeoutMs: 120_000 });
    const rollSeconds = (Date.now() - t0) / 1000;
    await traffic.stop();
    const during = (await commits()) - before;
    expect(roll.code, roll.stderr + roll.stdout).toBe(0);
    const lines = roll.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const nodes = lines.filter((l) => l.type === 'node');
    expect(nodes.map((n) => [n.node, n.ok, n.source])).toEqual(
      cluster.nodes.map((n) => [n.id, true, 'presence']),
    );
    for (const n of nodes) expect(n.resumed, JSON.stringify(n)).toBe(n.sessions);
    expect(lines.at(-1)).toMatchObject({ type: 'summary', ok: true, notRestarted: [] });

    await waitFor(() => fleet.reconnecting === 0 && fleet.undelivered() === 0, {
      timeoutMs: 15_000,
      what: 'every session welcomed again and every acknowledged DM delivered',
    });
    const resumedSessions = new Set(fleet.reconnects.map((r) => r.session));
    const listed = await fleet.listed();
    const ids = fleet.clients.map((c) => c.sessionId);
    const nodeIds = cluster.nodes.map((n) => n.id);
    expect({
      // Every node went once, so every session was moved at least once, and every welcome said resumed.
      moved: resumedSessions.size,
      notResumed: fleet.reconnects.filter((r) => !r.resumed).length,
      onLiveNode: fleet.clients.filter((c) => nodeIds.includes(c.node!)).length,
      failedSends: fleet.failedSends,
      undelivered: fleet.undelivered(),
      listedOnce: ids.filter((id) => listed.get(id) === 1).length,
      listedTotal: [...listed.values()].reduce((a, b) => a + b, 0),
      peerLeft: fleet.peerLeft.size,
    }).toEqual({
      moved: SESSIONS,
      notResumed: 0,
      onLiveNode: SESSIONS,
      failedSends: 0,
      undelivered: 0,
      listedOnce: SESSIONS,
      listedTotal: SESSIONS,
      peerLeft: 0,
    });
    expect(fleet.ackedCount).toBeGreaterThan(100);
    const rows = await db.query<{ n: string }>(
      'SELECT count(*) AS n FROM presence WHERE disconnected_at IS NULL',
    );
    expect(Number(rows.rows[0]!.n)).toBe(SESSIONS);

    const extra = during - rate * rollSeconds;
    const perResume = extra / fleet.reconnects.length;
    console.log(
      `rolling restart: ${fleet.reconnects.length} resumes of ${SESSIONS} sessions, ${fleet.ackedCount} DMs acknowledged and delivered; ` +
        `xact_commit during the roll ${during} over ${rollSeconds.toFixed(1)} s, background ${rate.toFixed(1)}/s → ` +
        `${perResume.toFixed(2)} commits per resumed session (node restarts included)`,
    );
    writeFileSync(
      join(cwd, 'roll-figures.json'),
      JSON.stringify({ during, rate, rollSeconds, resumes: fleet.reconnects.length, perResume }),
    );
    fleet.close();
  }, 120_000);

  it('an environment whose start command fails: the roll stops at that node, named (exit 1), the others untouched', async () => {
    // The local cluster's nodes, driven through an environment file's control commands (the --env path).
    const control = (action: string) => `cd .. && "${process.execPath}" "${WORKBENCH}" node ${action} {node}`;
    mkdirSync(join(cwd, 'environments'), { recursive: true });
    writeFileSync(
      join(cwd, 'environments', 'rollfail.json'),
      JSON.stringify({
        phase: 3,
        lbUrl: cluster.lb.url,
        nodes: cluster.nodes.map(({ id, url }) => ({ id, url })),
        databaseUrlEnv: 'ROLL_DB',
        adminTokenEnv: 'ROLL_ADMIN',
        flags: { provider: 'file', dir: cluster.flagsDir },
        control: { kill: control('kill'), stop: control('stop'), start: 'echo no such node >&2; exit 3' },
      }),
    );
    const secrets = { ROLL_DB: db.url, ROLL_ADMIN: cluster.adminToken };
    const before = current();
    const roll = await runWorkbench(['restart', '--rolling', '--env', 'rollfail'], secrets, cwd);
    expect(roll.code, roll.stderr).toBe(1);
    const [first] = cluster.nodes;
    expect(roll.stdout).toContain(
      `${first!.id.padEnd(14)} FAILED  starting ${first!.id} failed: "echo no such node >&2; exit 3" for ${first!.id} exited with 3: no such node`,
    );
    expect(roll.stdout).toContain(
      `not restarted: ${cluster.nodes
        .slice(1)
        .map((n) => n.id)
        .join(', ')}`,
    );
    // The others were never stopped: same pids, still healthy.
    for (const node of current().nodes.slice(1)) {
      expect(node.pid).toBe(before.nodes.find((n) => n.id === node.id)!.pid);
      expect((await fetch(`${node.url}/health`)).status).toBe(200);
    }
    // A node down: the next roll refuses before touching anything.
    const refused = await runWorkbench(['restart', '--rolling'], {}, cwd);
    expect({ code: refused.code, stderr: refused.stderr.trim() }).toMatchObject({
      code: 1,
      stderr: expect.stringContaining(`${first!.id} is not healthy`),
    });
    expect((await runWorkbench(['node', 'start', first!.id], {}, cwd)).code).toBe(0);
  }, 60_000);

  it('sessions that never come back fail the roll at their node (exit 1, counted), which is started again', async () => {
    const before = current();
    const [first] = before.nodes;
    const plans = await createLoadMeshes(
      { url: cluster.lb.url, token: cluster.adminToken },
      { peers: 3, meshes: 1 },
    );
    // Straight to the first node, and no reconnect: its sessions cannot resume anywhere.
    const peers = plans.map(
      (plan) =>
        new MeshClient({
          urls: [`${first!.url.replace('http', 'ws')}/ws`],
          meshId: plan.meshId,
          keys: plan.keys,
          reconnect: false,
        }),
    );
    try {
      await Promise.all(peers.map((peer) => peer.connect()));
      const roll = await runWorkbench(['restart', '--rolling', '--resume-timeout', '2s'], {}, cwd);
      expect(roll.code, roll.stderr).toBe(1);
      expect(roll.stdout).toContain(
        `${first!.id.padEnd(14)} FAILED  ${first!.id}: 3 of its 3 sessions did not resume on another node within 2 s (read from Postgres presence)`,
      );
      expect(roll.stdout).toContain(
        `not restarted: ${before.nodes
          .slice(1)
          .map((n) => n.id)
          .join(', ')}`,
      );
      const now = current();
      expect(now.nodes[0]!.pid).not.toBe(first!.pid);
      expect((await fetch(`${first!.url}/health`)).status).toBe(200);
      expect(now.nodes.slice(1).map((n) => n.pid)).toEqual(before.nodes.slice(1).map((n) => n.pid));
    } finally {
      for (const peer of peers) peer.close();
    }
  }, 60_000);

  it.each([
    [[], 'only a rolling restart is offered: pass --rolling'],
    [['--rolling', '--resume-timeout', 'soon'], '--resume-timeout must be a duration'],
    [['--rolling', '--env', 'nosuch'], 'no environment "nosuch"'],
    [['--rolling', '--env', 'nocontrol'], 'environment "nocontrol" has no node control commands'],
    [['--rolling', '--env', 'onenode'], 'environment "onenode" has one node'],
  ])('restart %j is a bad call: exit 2, nothing restarted', async (args, message) => {
    const file = (name: string, extra: object) =>
      writeFileSync(
        join(cwd, 'environments', `${name}.json`),
        JSON.stringify({
          phase: 3,
          lbUrl: cluster.lb.url,
          nodes: cluster.nodes.map(({ id, url }) => ({ id, url })),
          databaseUrlEnv: 'ROLL_DB',
          adminTokenEnv: 'ROLL_ADMIN',
          flags: { provider: 'file', dir: cluster.flagsDir },
          ...extra,
        }),
      );
    mkdirSync(join(cwd, 'environments'), { recursive: true });
    file('nocontrol', {});
    file('onenode', {
      nodes: [{ id: cluster.nodes[0]!.id, url: cluster.nodes[0]!.url }],
      control: { kill: 'true', stop: 'true', start: 'true' },
    });
    const pids = current().nodes.map((n) => n.pid);
    const result = await runWorkbench(['restart', ...args], { ROLL_DB: db.url, ROLL_ADMIN: 'x' }, cwd);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(message);
    expect(current().nodes.map((n) => n.pid)).toEqual(pids);
  });
});
