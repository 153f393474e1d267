import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pubkeyOf } from '@mesh-broker/sdk';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestNode } from '../helpers/broker.js';
import { runWorkbench } from '../helpers/cli.js';
import { closeAllClients, connectPeer, type TestMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { SERVER_URL } from '../helpers/postgres.js';

const dbName = `wb_test_cli_${randomBytes(4).toString('hex')}`;
const databaseUrl = SERVER_URL.replace(/\/[^/]*$/, `/${dbName}`);
const dir = mkdtempSync(join(tmpdir(), 'wb-cli-'));
let node: TestNode | undefined;

beforeAll(() => {});
afterAll(async () => {
  closeAllClients();
  await node?.stop();
  rmSync(dir, { recursive: true, force: true });
  const client = new pg.Client({ connectionString: SERVER_URL });
  await client.connect();
  await client.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  await client.end();
});

describe('workbench CLI', () => {
  it('migrate creates the database when missing and applies the migrations, twice without harm', async () => {
    for (let i = 0; i < 2; i++) {
      const result = await runWorkbench(['migrate', '--database-url', databaseUrl]);
      expect(result.stderr).toBe('');
      expect(result.code).toBe(0);
      expect(result.stdout).toContain(`migrations applied to ${dbName}`);
    }
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    const tables = await client.query(
      "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename",
    );
    await client.end();
    expect(tables.rows.map((r) => r.tablename)).toEqual([
      'audit_log',
      'audit_verifier_progress',
      'cluster_leases',
      'deliveries',
      'delivery_feeds',
      'flag_states',
      'mcp_servers',
      'members',
      'mesh_clocks',
      'meshes',
      'messages',
      'nodes',
      'presence',
      'promotion_pauses',
      'promotions',
      'schedule_occurrences',
      'schedules',
      'session_bindings',
      'smoke_runs',
      'stream_subscriptions',
      'watches',
    ]);
  });

  it('mesh create writes a mesh with K members whose keys work for a hello', async () => {
    const out = join(dir, 'mesh.json');
    const result = await runWorkbench(['mesh', 'create', 'team', '--members', '3', '--out', out], {
      DATABASE_URL: databaseUrl,
    });
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('with 3 members written to');
    expect(statSync(out).mode & 0o777).toBe(0o600);
    const file = JSON.parse(readFileSync(out, 'utf8')) as TestMesh & { name: string };
    expect(file.name).toBe('team');
    expect(file.members).toHaveLength(3);
    for (const member of file.members) {
      expect(member.secretKey).toMatch(/^[0-9a-f]{64}$/);
      expect(pubkeyOf(member.secretKey)).toBe(member.pubkey);
    }
    node = await startNode({ kind: 'in-process', databaseUrl });
    const a = await connectPeer(node.wsUrl, file, file.members[0]!);
    const b = await connectPeer(node.wsUrl, file, file.members[1]!);
    const got = b.next('message');
    await a.send(file.members[1]!.pubkey, 'made by the CLI');
    expect((await got).body).toBe('made by the CLI');

    const again = await runWorkbench(['mesh', 'create', 'team', '--members', '1'], {
      DATABASE_URL: databaseUrl,
    });
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('a mesh named "team" already exists');
  });

  it.each([
    [['mesh', 'create', 'x'], 'needs --members K'],
    [['mesh', 'create', 'x', '--members', 'many'], '--members must be a positive whole number'],
    [['mesh', 'create', '--members', '2'], 'needs a NAME'],
    [['mesh', 'delete', 'x'], 'unknown mesh action "delete"'],
    [['mesh', 'create', 'x', '--members', '2', '--colour', 'red'], "Unknown option '--colour'"],
    [['frobnicate'], 'unknown command "frobnicate"'],
    [['up', '--lb', 'nginx'], '--lb must be haproxy or traefik'],
    [['node', 'reboot', 'broker-1'], 'unknown node action "reboot"'],
    [['smoke', '--phase', '9'], '--phase must be 0, 1, 2, 3 or 4'],
  ])('refuses %j with usage and exit code 2, creating nothing', async (args, message) => {
    const result = await runWorkbench(args, { DATABASE_URL: databaseUrl });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(message);
    expect(result.stderr).toContain('usage: workbench');
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    const meshes = await client.query("SELECT count(*)::int AS n FROM meshes WHERE name = 'x'");
    await client.end();
    expect(meshes.rows[0]?.n).toBe(0);
  });

  it('up --lb traefik without a traefik binary says so and starts nothing', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'wb-no-traefik-'));
    try {
      // An empty PATH: no traefik, whatever this machine has installed.
      const result = await runWorkbench(['up', '--lb', 'traefik', '--port', '0'], { PATH: cwd }, cwd);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('no traefik binary on PATH');
      expect(existsSync(join(cwd, '.workbench', 'cluster.json'))).toBe(false);
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  });

  it('down never signals a process that merely reuses a pid of cluster.json', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'wb-stale-pids-'));
    const stranger = spawn('sleep', ['60'], { stdio: 'ignore' });
    try {
      mkdirSync(join(cwd, '.workbench'));
      writeFileSync(
        join(cwd, '.workbench', 'cluster.json'),
        JSON.stringify({
          phase: 3,
          lb: { url: 'http://127.0.0.1:1', pid: stranger.pid },
          nodes: [{ id: 'broker-1', url: 'http://127.0.0.1:2', pid: stranger.pid }],
          databaseUrl: databaseUrl,
        }),
      );
      const result = await runWorkbench(['down'], {}, cwd);
      expect(result.code, result.stderr).toBe(0);
      expect(stranger.exitCode).toBeNull();
      expect(stranger.signalCode).toBeNull();
      process.kill(stranger.pid!, 0); // still there
    } finally {
      stranger.kill('SIGKILL');
      rmSync(cwd, { recursive: true, force: true });
    }
  });

  it('broker refuses bad configuration naming the variable', async () => {
    const badPort = await runWorkbench(['broker'], {
      ADMIN_TOKEN: 'a-long-enough-admin-token',
      PORT: 'eighty',
    });
    expect(badPort.code).toBe(2);
    expect(badPort.stderr).toContain('PORT: must be a whole number');
    const noToken = await runWorkbench(['broker'], { ADMIN_TOKEN: '' });
    expect(noToken.code).toBe(2);
    expect(noToken.stderr).toContain('ADMIN_TOKEN: is required');
  });
});
