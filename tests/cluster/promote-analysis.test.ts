/**
 * `workbench promote --analysis` against a REAL Prometheus scraping a REAL local cluster (issue 27 item 2):
 * a healthy promotion from phase 2 to 3 passes its baseline and bake; the same promotion with the
 * regression `delivery-slow` (+50 ms per remote delivery, switched on by the flip) is aborted within two
 * analysis intervals of its bake and rolled back; an analysis with no data (and one whose every measurement
 * errors) pauses, never passes, and holds the environment until `--abort`; `--resume` of a baseline pause
 * goes on through the flip, a bake without data pauses with the flags flipped, and `--abort` puts them back. The environment is an
 * environment file over the local cluster, without node control, so the node-failure checks are skipped
 * and the two smoke runs take seconds; steady cross-node DMs give the latency metric its data.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateMemberKeys, type MeshClient } from '@mesh-broker/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { phasePreset } from '../../flags/registry.js';
import { runWorkbench } from '../helpers/cli.js';
import { FAST_CLUSTER } from '../helpers/cluster.js';
import { writeEnvironmentFile } from '../helpers/environments.js';
import { closeAllClients, connectPeer, type TestMesh } from '../helpers/mesh.js';
import { freePort } from '../helpers/ports.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let cwd: string;
let prometheus: ChildProcess | undefined;
let prometheusExited: Promise<unknown> = Promise.resolve();
let prometheusUrl = '';
let prometheusLog = '';
let traffic: { stop: () => Promise<void> } | undefined;
let mesh: TestMesh | undefined;

// The default send limit (60 a minute per member): the smoke's rate-limit check needs a quota it can use up.
const CLUSTER_ENV = FAST_CLUSTER;
const SENDERS = 4;
const env = { WORKBENCH_ACTOR: 'release-manager', AN_DATABASE_URL: '', AN_ADMIN_TOKEN: '', AN_REDIS_URL: '' };

interface ClusterFile {
  lb: { url: string };
  nodes: Array<{ id: string; url: string }>;
  databaseUrl: string;
  adminToken: string;
  redisUrl: string;
  redisKeyPrefix: string;
}

const cluster = (): ClusterFile => JSON.parse(readFileSync(join(cwd, '.workbench', 'cluster.json'), 'utf8'));
const flagsFile = () => readFileSync(join(cwd, '.workbench', 'flags', 'local.json'), 'utf8');

/** `up --phase 2` (with extra broker variables), then the environment file and Prometheus's targets for it. */
async function up(extra: Record<string, string> = {}) {
  const started = await runWorkbench(
    ['up', '--phase', '2', '--env', 'local', '--port', '0', '--database-url', db.url],
    { ...CLUSTER_ENV, ...extra },
    cwd,
  );
  expect(started.code, started.stderr).toBe(0);
  const c = cluster();
  Object.assign(env, {
    AN_DATABASE_URL: c.databaseUrl,
    AN_ADMIN_TOKEN: c.adminToken,
    AN_REDIS_URL: c.redisUrl,
  });
  // The local cluster as an environment file: no control (the node-failure checks are skipped), a Prometheus.
  writeEnvironmentFile(cwd, 'local', {
    phase: 2,
    lbUrl: c.lb.url,
    nodes: c.nodes.map(({ id, url }) => ({ id, url })),
    databaseUrlEnv: 'AN_DATABASE_URL',
    adminTokenEnv: 'AN_ADMIN_TOKEN',
    flags: { provider: 'file', dir: '../.workbench/flags' },
    push: { redisUrlEnv: 'AN_REDIS_URL', keyPrefix: c.redisKeyPrefix },
    watchTargetHost: '127.0.0.1',
    prometheusUrl,
  });
  writeFileSync(
    join(cwd, 'targets.json'),
    JSON.stringify([{ targets: c.nodes.map((n) => new URL(n.url).host), labels: {} }]),
  );
  // Prometheus has the new nodes (file_sd, read again on change) and a sample of each.
  await waitFor(async () => (await queryCount('up{job="mesh-broker"} == 1')) === c.nodes.length, {
    timeoutMs: 30_000,
    what: 'prometheus scraping every node',
  });
}

async function queryCount(expr: string): Promise<number> {
  const response = await fetch(`${prometheusUrl}/api/v1/query?query=${encodeURIComponent(expr)}`);
  const body = (await response.json()) as { data?: { result: unknown[] } };
  return body.data?.result.length ?? 0;
}

async function startPrometheus() {
  const port = await freePort();
  prometheusUrl = `http://127.0.0.1:${port}`;
  const config = join(cwd, 'prometheus.yml');
  writeFileSync(join(cwd, 'targets.json'), '[]');
  writeFileSync(
    config,
    [
      'global:',
      '  scrape_interval: 1s',
      'scrape_configs:',
      '  - job_name: mesh-broker',
      '    file_sd_configs:',
      `      - files: [${JSON.stringify(join(cwd, 'targets.json'))}]`,
      '        refresh_interval: 1s',
      '',
    ].join('\n'),
  );
  const child = spawn(
    'prometheus',
    [
      `--config.file=${config}`,
      `--storage.tsdb.path=${join(cwd, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  prometheus = child;
  child.stdout!.on('data', (chunk) => {
    prometheusLog += chunk;
  });
  child.stderr!.on('data', (chunk) => {
    prometheusLog += chunk;
  });
  prometheusExited = new Promise((resolve) => child.on('exit', resolve));
  await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`prometheus exited:\n${prometheusLog}`);
      return fetch(`${prometheusUrl}/-/ready`).then(
        (r) => r.ok,
        () => false,
      );
    },
    { timeoutMs: 20_000, what: 'prometheus ready' },
  );
}

/** Cross-node DMs, broker-1 → broker-2, about 3.6 a second from 4 members (each under its send limit). */
async function startTraffic() {
  const c = cluster();
  const ws = (i: number) => `${c.nodes[i]!.url.replace(/^http/, 'ws')}/ws`;
  if (!mesh) {
    const call = async (path: string, body: unknown) => {
      const response = await fetch(`${c.nodes[0]!.url}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${c.adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return (await response.json()) as Record<string, string>;
    };
    const { meshId } = await call('/admin/meshes', { name: 'analysis-traffic' });
    const members = Array.from({ length: SENDERS + 1 }, () => generateMemberKeys());
    for (const member of members) await call(`/admin/meshes/${meshId}/members`, { pubkey: member.pubkey });
    mesh = { meshId: meshId!, members };
  }
  const traffic = mesh;
  const receiverKeys = traffic.members[SENDERS]!;
  const receiver: MeshClient = await connectPeer(ws(1), traffic, receiverKeys);
  let received = 0;
  receiver.on('message', () => received++);
  let running = true;
  const loops = traffic.members.slice(0, SENDERS).map(async (member, i) => {
    const sender = await connectPeer(ws(0), traffic, member);
    await new Promise((resolve) => setTimeout(resolve, i * 275));
    while (running) {
      await sender.send(receiverKeys.pubkey, 'dm').catch(() => {});
      await new Promise((resolve) => setTimeout(resolve, 1100));
    }
  });
  await waitFor(() => received > 5, { timeoutMs: 10_000, what: 'cross-node DMs delivered' });
  // Prometheus has scraped enough of them for a rate over the analysis's window.
  await waitFor(async () => (await queryCount(`${LATENCY_QUERY} >= 0`)) === 1, {
    timeoutMs: 30_000,
    what: 'fan-out latency in prometheus',
  });
  return {
    stop: async () => {
      running = false;
      await Promise.all(loops);
      closeAllClients();
    },
  };
}

function analysisFile(name: string, metrics: object[]): string {
  const path = join(cwd, `${name}.json`);
  writeFileSync(path, JSON.stringify({ metrics }));
  return path;
}

const LATENCY_QUERY =
  'histogram_quantile(0.5, sum by (le) (rate(mesh_broker_fanout_latency_seconds_bucket[5s])))';

/** The median cross-node delivery under 40 ms: healthy on loopback, never with +50 ms per delivery. */
const latency = (count: number) => ({
  name: 'delivery-latency-p50',
  interval: '1s',
  count,
  successCondition: 'result < 0.04',
  failureCondition: 'result >= 0.04',
  provider: {
    prometheus: {
      query: LATENCY_QUERY,
    },
  },
});

async function promote(args: string[]) {
  const result = await runWorkbench(['promote', '--env', 'local', '--to', '3', '--json', ...args], env, cwd, {
    timeoutMs: 170_000,
  });
  const lines = result.stdout
    .trim()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line));
  return {
    ...result,
    lines,
    outcome: lines.at(-1),
    measurements: lines.filter((l) => l.type === 'measurement'),
  };
}

const auditCount = async (eventType: string) =>
  (await db.query('SELECT count(*)::int AS n FROM audit_log WHERE event_type = $1', [eventType])).rows[0]?.n;

beforeAll(async () => {
  db = await createTestDatabase('promote_analysis');
  cwd = mkdtempSync(join(tmpdir(), 'wb-promote-analysis-'));
  await startPrometheus();
  await up();
  traffic = await startTraffic();
}, 90_000);

afterAll(async () => {
  await traffic?.stop();
  await runWorkbench(['down'], {}, cwd);
  if (prometheus && prometheus.exitCode === null) prometheus.kill('SIGTERM');
  await prometheusExited;
  rmSync(cwd, { recursive: true, force: true });
  await db?.drop();
});

describe('promote --analysis against a real Prometheus', () => {
  it('a healthy promotion passes its baseline and its bake; each measurement counted and audited', async () => {
    const file = analysisFile('healthy', [latency(3)]);
    const metricsFile = join(cwd, 'analysis.prom');
    const result = await promote(['--analysis', file, '--metrics-file', metricsFile]);
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.outcome).toMatchObject({
      type: 'outcome',
      status: 'promoted',
      from: 2,
      to: 3,
      exitCode: 0,
    });
    const stages = result.measurements.map((m) => `${m.stage} ${m.outcome}`);
    expect(stages).toEqual([...Array(3).fill('baseline successful'), ...Array(3).fill('bake successful')]);
    expect(await auditCount('promotion.analysis.measurement')).toBe(6);
    const text = readFileSync(metricsFile, 'utf8');
    expect(text).toContain(
      'mesh_workbench_analysis_measurements_total{environment="local",metric="delivery-latency-p50",stage="bake",outcome="successful"} 3',
    );
  }, 180_000);

  it('the regression switched on by the flip is aborted within 2 bake intervals and rolled back (exit 1)', async () => {
    // Back to phase 2, then the same cluster with the test-only regression armed (it acts from phase 3 on).
    const back = await runWorkbench(['rollback', '--env', 'local'], env, cwd);
    expect(back.code, back.stderr).toBe(0);
    await traffic?.stop();
    await runWorkbench(['down'], {}, cwd);
    await up({ WORKBENCH_TEST_PLANTS: '1', WORKBENCH_PLANT: 'delivery-slow' });
    traffic = await startTraffic();
    const result = await promote(['--analysis', analysisFile('regression', [latency(10)])]);
    expect(result.code, result.stdout + result.stderr).toBe(1);
    expect(result.outcome).toMatchObject({ status: 'rolled-back', from: 2, exitCode: 1 });
    expect(result.outcome.reason).toMatch(/^bake analysis failed: delivery-latency-p50: 1 failed/);
    const baseline = result.measurements.filter((m) => m.stage === 'baseline');
    const bake = result.measurements.filter((m) => m.stage === 'bake');
    expect(baseline.map((m) => m.outcome)).toEqual(Array(10).fill('successful'));
    // Within 2 analysis intervals of the bake: its first or second measurement failed, and it stopped there.
    expect(bake.length).toBeLessThanOrEqual(2);
    expect(bake.at(-1)).toMatchObject({ outcome: 'failed' });
    expect(bake.at(-1).values[0]).toBeGreaterThanOrEqual(0.04);
    // Rolled back: phase 2's flags, on every node.
    for (const node of cluster().nodes) {
      const report = (await (await fetch(`${node.url}/flags`)).json()) as {
        flags: Record<string, { acting: boolean }>;
      };
      expect(report.flags['ha.streams']?.acting).toBe(phasePreset(2)['ha.streams']);
    }
    const last = await db.query('SELECT status FROM promotions ORDER BY id DESC LIMIT 1');
    expect(last.rows[0]).toEqual({ status: 'rolled-back' });
    const event = await db.query(
      "SELECT payload FROM audit_log WHERE event_type = 'promotion.rolled-back' ORDER BY id DESC LIMIT 1",
    );
    expect(event.rows[0]?.payload.analysis).toMatchObject({ stage: 'bake', status: 'failed' });
  }, 240_000);

  it('no data, or every measurement erroring, pauses (exit 5), never passes; the pause holds until --abort', async () => {
    const closed = `http://127.0.0.1:${await freePort()}`;
    const file = analysisFile('no-data', [
      {
        ...latency(2),
        name: 'no-such-series',
        provider: { prometheus: { query: 'max(mesh_broker_no_such_series)' } },
      },
      {
        ...latency(2),
        name: 'prometheus-away',
        provider: { prometheus: { address: closed, query: 'max(up)' } },
      },
    ]);
    const before = flagsFile();
    const result = await promote(['--analysis', file]);
    expect(result.code, result.stdout + result.stderr).toBe(5);
    expect(result.outcome).toMatchObject({
      status: 'paused',
      exitCode: 5,
      analysis: { stage: 'baseline', status: 'inconclusive' },
    });
    expect(result.outcome.reason).toContain('baseline analysis inconclusive (nothing changed)');
    const outcomes = new Set(result.measurements.map((m) => `${m.metric} ${m.outcome}`));
    expect(outcomes).toEqual(new Set(['no-such-series inconclusive', 'prometheus-away error']));
    expect(flagsFile()).toBe(before);
    expect((await db.query('SELECT stage FROM promotion_pauses')).rows).toEqual([{ stage: 'baseline' }]);
    expect(await auditCount('promotion.paused')).toBe(1);

    // Paused: another promotion (without --resume or --abort) and a rollback are refused.
    const again = await promote(['--analysis', file]);
    expect(again.code).toBe(3);
    expect(again.outcome.reason).toMatch(
      /is paused \(baseline analysis inconclusive: .*promote --resume or --abort/,
    );
    const rollback = await runWorkbench(['rollback', '--env', 'local'], env, cwd);
    expect(rollback.code).toBe(1);
    expect(rollback.stderr).toContain('is paused');

    const aborted = await promote(['--abort']);
    expect(aborted.code, aborted.stdout + aborted.stderr).toBe(3);
    expect(aborted.outcome.reason).toBe('aborted by release-manager at the baseline pause (no-such-series)');
    expect((await db.query('SELECT count(*)::int AS n FROM promotion_pauses')).rows[0]?.n).toBe(0);
    expect(await auditCount('promotion.aborted')).toBe(1);
    expect(flagsFile()).toBe(before);
    // Nothing paused any more: --resume is bad input.
    const resume = await promote(['--resume']);
    expect(resume.code).toBe(2);
    expect(resume.stdout).toContain('--resume: no paused promotion of local');
  }, 120_000);

  it('--resume after a baseline pause goes on; a bake with no data pauses with the flags flipped; --abort puts them back (exit 1)', async () => {
    // Data while ha.streams is off (phase 2), none once it is on: the baseline passes, the bake has nothing.
    const file = analysisFile('bake-no-data', [
      {
        name: 'streams-off',
        interval: '1s',
        count: 2,
        successCondition: 'result == 0',
        provider: { prometheus: { query: 'max(mesh_broker_flag_enabled{flag="ha.streams"} == 0)' } },
      },
    ]);
    // Paused at the baseline (no data), then resumed with this analysis for the bake: the flip goes ahead.
    const noData = await promote(['--analysis', join(cwd, 'no-data.json')]);
    expect(noData.code, noData.stdout + noData.stderr).toBe(5);
    const result = await promote(['--resume', '--analysis', file]);
    expect(result.code, result.stdout + result.stderr).toBe(5);
    expect(result.lines.some((l) => l.type === 'check' && l.when === 'after')).toBe(true);
    expect(result.outcome).toMatchObject({
      status: 'paused',
      analysis: { stage: 'bake', status: 'inconclusive' },
    });
    expect(result.outcome.reason).toContain("bake analysis inconclusive (the flags are phase 3's)");
    // Its baseline was looked at by a human: the resumed run measures the bake only.
    expect(result.measurements.map((m) => `${m.stage} ${m.outcome}`)).toEqual(['bake inconclusive']);
    expect(await auditCount('promotion.resumed')).toBe(1);
    // While it bakes paused, the environment is at phase 3 (its flags are on).
    const status = await runWorkbench(['status', '--env', 'local', '--json'], env, cwd);
    expect(JSON.parse(status.stdout).phase, status.stdout + status.stderr).toBe(3);
    const acting = async () => {
      const report = (await (await fetch(`${cluster().nodes[0]!.url}/flags`)).json()) as {
        flags: Record<string, { acting: boolean }>;
      };
      return report.flags['ha.streams']?.acting;
    };
    expect(await acting()).toBe(true);
    const aborted = await promote(['--abort']);
    expect(aborted.code, aborted.stdout + aborted.stderr).toBe(1);
    expect(aborted.outcome).toMatchObject({
      status: 'rolled-back',
      reason: 'aborted by release-manager at the bake pause (streams-off)',
    });
    expect(await acting()).toBe(false);
    const last = await db.query(
      'SELECT from_phase, to_phase, status FROM promotions ORDER BY id DESC LIMIT 1',
    );
    expect(last.rows[0]).toEqual({ from_phase: 2, to_phase: 3, status: 'rolled-back' });
  }, 180_000);
});
