import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues } from '../../flags/registry.js';
import { runWorkbench } from '../helpers/cli.js';
import { type ProcessNode, startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

const ENV = 'wbtest';
let db: TestDatabase;
let dir: string;
const nodes: ProcessNode[] = [];
const prefix = `wbtest:${randomBytes(4).toString('hex')}:`;
let cliEnv: Record<string, string>;

interface FlagsReport {
  node: string;
  source: string;
  error: string | null;
  flags: Record<string, { value: boolean; acting: boolean; note?: string }>;
}

const flagsOf = async (node: ProcessNode) => (await (await fetch(`${node.url}/flags`)).json()) as FlagsReport;
const flagFile = () => join(dir, `${ENV}.json`);

beforeAll(async () => {
  db = await createTestDatabase('flags');
  dir = mkdtempSync(join(tmpdir(), 'wb-flags-'));
  writeFileSync(flagFile(), renderFlagsDocument(defaultFlagValues()));
  const env = {
    FLAGS_DIR: dir,
    FLAGS_ENV: ENV,
    REDIS_KEY_PREFIX: prefix,
    FLAGS_POLL_MS: '60000',
    HEARTBEAT_MS: '500',
  };
  // One after the other: three cold starts at once on two shared cores can outlast a start's timeout.
  for (const id of ['f1', 'f2', 'f3']) {
    nodes.push(await startNode({ kind: 'process', databaseUrl: db.url, env: { ...env, NODE_ID: id } }));
  }
  cliEnv = {
    DATABASE_URL: db.url,
    FLAGS_DIR: dir,
    REDIS_KEY_PREFIX: prefix,
    WORKBENCH_ACTOR: 'release-manager',
  };
});
afterAll(async () => {
  for (const node of nodes) node.process.kill('SIGKILL');
  await Promise.all(nodes.map((n) => n.exited));
  rmSync(dir, { recursive: true, force: true });
  await db?.drop();
});

/** Sets a flag with the CLI; resolves with ms from the CLI's start until every node acts on it. */
async function flipAndMeasure(flag: string, on: boolean): Promise<number> {
  const started = Date.now();
  const cli = runWorkbench(['flags', 'set', flag, on ? 'on' : 'off', '--env', ENV], cliEnv);
  await waitFor(
    async () => (await Promise.all(nodes.map(flagsOf))).every((r) => r.flags[flag]!.acting === on),
    {
      // Far below the nodes' one-minute backstop poll, and far above a loaded machine's CLI start (seen up to
      // 15 s on shared cores): it tells a push from the poll without timing anything.
      timeoutMs: 30_000,
      intervalMs: 5,
      what: `${flag} ${on} on every node`,
    },
  );
  const elapsed = Date.now() - started;
  const result = await cli;
  expect(result.code).toBe(0);
  return elapsed;
}

describe('flags over three node processes (file provider)', () => {
  it('reports what each node acts on: /flags, metrics and the heartbeat row', async () => {
    const report = await flagsOf(nodes[0]!);
    expect(report).toMatchObject({
      node: 'f1',
      environment: ENV,
      provider: 'file',
      source: 'file',
      error: null,
    });
    expect(report.flags['ha.audit']).toEqual({
      value: false,
      acting: false,
      mode: 'off',
      row: 'audit lastHash',
    });
    expect(report.flags['ha.active-lease']).toEqual({
      value: false,
      acting: false,
      mode: 'off',
      row: 'background work on a warm standby',
    });
    const metrics = await (await fetch(`${nodes[0]!.url}/metrics`)).text();
    expect(metrics).toContain('mesh_broker_flag_enabled{flag="ha.audit",node="f1"} 0');
    const row = await db.query(
      "SELECT info->'flags'->'flags'->'ha.audit' AS audit FROM nodes WHERE id = 'f1'",
    );
    expect(row.rows[0]?.audit).toEqual({ value: false, acting: false, mode: 'off', row: 'audit lastHash' });
  });

  it('propagates `workbench flags set` to every node at once (push/watch, not the poll), audited once per change', async () => {
    const timings: number[] = [];
    for (let i = 0; i < 6; i++) timings.push(await flipAndMeasure('ha.rate-limits', i % 2 === 0));
    const sorted = [...timings].sort((a, b) => a - b);
    console.log(
      `flag convergence over 3 nodes (CLI start → every node acting), ms: ${timings.join(', ')}; median ${sorted[3]}`,
    );
    // The figure is reported, not judged here (timing belongs to benchmarks); the bound only proves the
    // change travelled by push or file watch, since the nodes' backstop poll in this test is a minute.
    expect(Math.max(...timings)).toBeLessThan(30_000);
    const events = await db.query(
      `SELECT actor, payload FROM audit_log WHERE mesh_id = '00000000-0000-0000-0000-000000000000'
        AND payload->>'flag' = 'ha.rate-limits' ORDER BY seq`,
    );
    expect(events.rows).toHaveLength(6);
    expect(events.rows[0]).toEqual({
      actor: 'release-manager',
      payload: { environment: ENV, flag: 'ha.rate-limits', from: false, to: true },
    });
    // Setting the value it already has changes nothing and audits nothing.
    const again = await runWorkbench(['flags', 'set', 'ha.rate-limits', 'off', '--env', ENV], cliEnv);
    expect(again.stdout).toContain('already off');
    const after = await db.query(
      `SELECT count(*)::int AS n FROM audit_log WHERE payload->>'flag' = 'ha.rate-limits'`,
    );
    expect(after.rows[0]?.n).toBe(6);
    const verify = await runWorkbench(['audit', 'verify', '--database-url', db.url]);
    expect(verify.code).toBe(0);
  }, 240_000);

  it('audits the first change of an environment whose values were never recorded, from the file value', async () => {
    // A fresh environment starting from a preset with ha.audit on: no flag_states row yet.
    writeFileSync(join(dir, 'fresh.json'), renderFlagsDocument({ ...defaultFlagValues(), 'ha.audit': true }));
    const off = await runWorkbench(['flags', 'set', 'ha.audit', 'off', '--env', 'fresh'], cliEnv);
    expect(off.code, off.stderr).toBe(0);
    expect(off.stdout).toContain('ha.audit: on → off in fresh');
    const events = await db.query(
      `SELECT payload FROM audit_log WHERE payload->>'environment' = 'fresh' AND event_type = 'flag.changed'`,
    );
    expect(events.rows).toEqual([
      { payload: { environment: 'fresh', flag: 'ha.audit', from: true, to: false } },
    ]);
  });

  it('lists the desired value and each node, and flags a disagreement', async () => {
    await flipAndMeasure('ha.audit', true);
    const listed = await runWorkbench(['flags', 'list', '--env', ENV], cliEnv);
    expect(listed.code).toBe(0);
    const auditLine = listed.stdout.split('\n').find((l) => l.startsWith('ha.audit'))!;
    expect(auditLine).toMatch(/^ha\.audit\s+3\s+on\s+on\s+on\s+on$/);
    // A misconfigured node of the environment (its own copy of the flags folder) acts otherwise: shown.
    const strayDir = mkdtempSync(join(tmpdir(), 'wb-flags-stray-'));
    writeFileSync(join(strayDir, `${ENV}.json`), renderFlagsDocument(defaultFlagValues()));
    const stray = await startNode({
      kind: 'process',
      databaseUrl: db.url,
      env: {
        FLAGS_DIR: strayDir,
        FLAGS_ENV: ENV,
        REDIS_KEY_PREFIX: prefix,
        HEARTBEAT_MS: '500',
        NODE_ID: 'f4',
      },
    });
    try {
      const json = JSON.parse((await runWorkbench(['flags', 'list', '--env', ENV, '--json'], cliEnv)).stdout);
      const audit = json.flags.find((f: { flag: string }) => f.flag === 'ha.audit');
      expect(audit).toMatchObject({ desired: true, disagree: true });
      expect(audit.nodes.f1).toEqual({ value: true, acting: true, mode: 'on', row: 'audit lastHash' });
      expect(audit.nodes.f4).toEqual({ value: false, acting: false, mode: 'off', row: 'audit lastHash' });
      expect(json.nodes).toEqual(['f1', 'f2', 'f3', 'f4']);
      const table = (await runWorkbench(['flags', 'list', '--env', ENV], cliEnv)).stdout;
      expect(table.split('\n').find((l) => l.startsWith('ha.audit'))).toMatch(
        /^ha\.audit\s+3\s+on\s+on\s+on\s+on\s+off\s+DISAGREE$/,
      );
    } finally {
      stray.process.kill('SIGTERM');
      await stray.exited;
      rmSync(strayDir, { recursive: true, force: true });
    }
  });

  it('follows a hand edit of the file, audited once by the first node to see it', async () => {
    const values = JSON.parse(readFileSync(flagFile(), 'utf8')).flags;
    writeFileSync(flagFile(), renderFlagsDocument({ ...values, 'ha.audit': false }));
    await waitFor(async () =>
      (await Promise.all(nodes.map(flagsOf))).every((r) => !r.flags['ha.audit']!.acting),
    );
    const events = await waitFor(async () => {
      const r = await db.query(
        `SELECT actor FROM audit_log WHERE payload->>'flag' = 'ha.audit' AND payload->>'to' = 'false'
          AND payload->>'environment' = $1`,
        [ENV],
      );
      return r.rows.length > 0 ? r.rows : undefined;
    });
    expect(events).toHaveLength(1);
    expect(events[0]!.actor).toMatch(/^node:f[123]$/);
  });

  it('keeps the last good values when the file goes bad, reports it, and recovers', async () => {
    const good = readFileSync(flagFile(), 'utf8');
    const before = await flagsOf(nodes[1]!);
    writeFileSync(flagFile(), '{"flags": {"ha.audit": "yes please"}}');
    // (A plain write is not atomic: the node may first see half a file, also reported, then the whole.)
    const broken = await waitFor(async () => {
      const r = await flagsOf(nodes[1]!);
      return r.error?.includes('must be true, false or "shadow"') ? r : undefined;
    });
    expect(broken.error).toContain('flag "ha.audit" must be true, false or "shadow"');
    expect(broken.flags).toEqual(before.flags);
    expect(await (await fetch(`${nodes[1]!.url}/metrics`)).text()).toContain(
      'mesh_broker_flag_config_error{node="f2"} 1',
    );
    writeFileSync(flagFile(), good);
    await waitFor(async () => (await flagsOf(nodes[1]!)).error === null);
  });

  it.each([
    [['flags', 'set', 'ha.audti', 'on', '--env', ENV], 'unknown flag "ha.audti"; known flags: ha.presence'],
    [
      ['flags', 'set', 'ha.audit', 'maybe', '--env', ENV],
      'flag value must be "on", "off" or "shadow", got "maybe"',
    ],
    [['flags', 'set', 'ha.audit', 'on'], 'flags set needs --env E'],
    [['flags', 'list', '--env', ENV, '--provider', 'etcd'], '--provider must be "file" or "unleash"'],
    [['flags', 'toggle', 'ha.audit', '--env', ENV], 'unknown flags action "toggle"'],
  ])('refuses %j with a clear message and exit code 2, changing nothing', async (args, message) => {
    const before = readFileSync(flagFile(), 'utf8');
    const result = await runWorkbench(args, cliEnv);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(message);
    expect(readFileSync(flagFile(), 'utf8')).toBe(before);
  });
});
