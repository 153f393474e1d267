import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runWorkbench, WORKBENCH } from '../helpers/cli.js';
import { SMOKE_CLUSTER } from '../helpers/cluster.js';
import { writeEnvironmentFile } from '../helpers/environments.js';
import { readJunit } from '../helpers/junit.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

const started: Array<{ cwd: string; db: TestDatabase }> = [];

/** `workbench up` of a phase in a fresh folder, with the short timings of the cluster tests. */
async function cluster(phase: number) {
  const db = await createTestDatabase(`smoke_phase${phase}`);
  const cwd = mkdtempSync(join(tmpdir(), `wb-smoke-${phase}-`));
  started.push({ cwd, db });
  // Phase 4 is the two-region simulation: its own throw-away primary and replica (docs/multi-region.md).
  const database = phase === 4 ? [] : ['--database-url', db.url];
  const up = await runWorkbench(
    ['up', '--phase', String(phase), '--port', '0', ...database],
    SMOKE_CLUSTER,
    cwd,
  );
  expect(up.code, up.stderr).toBe(0);
  return cwd;
}

afterAll(async () => {
  for (const { cwd, db } of started) {
    await runWorkbench(['down'], {}, cwd);
    rmSync(cwd, { recursive: true, force: true });
    await db.drop();
  }
});

const lines = (stdout: string) => stdout.split('\n').filter((l) => /^[ !] /.test(l));
/** Every smoke check, as phase 3's expectations list them (the suite's own list). */
const CHECKS = Object.keys(
  JSON.parse(readFileSync(join(import.meta.dirname, '../../phases/phase3/expectations.json'), 'utf8')).checks,
);
/** n/a on a cluster of one region (no node reads a replica), whatever the phase: its gap cannot show there. */
const ONE_REGION_NA = 'peers-list-local-replica';
/** Skipped where the load balancer sets no sticky cookie (phases 3 and 4, whose expectation is n/a). */
const NO_STICKY_COOKIE = 'lb-sticky-reconnect';
const outcomes = (stdout: string) =>
  Object.fromEntries(lines(stdout).map((l) => [l.split(/\s+/)[2], l.split(/\s+/)[1]]));

describe('workbench smoke', () => {
  it('phase 1 (primary and standby): the gaps fail as expected, the rest passes, every expectation met', async () => {
    const cwd = await cluster(1);
    const result = await runWorkbench(['smoke', '--phase', '1'], {}, cwd);
    expect(result.code, result.stdout).toBe(0);
    expect(outcomes(result.stdout)).toEqual({
      'cross-node-dm': 'expected-fail',
      'cross-node-stream': 'expected-fail',
      'presence-cluster-wide': 'pass',
      'audit-chain-intact': 'expected-fail',
      'clock-single-authority': 'expected-fail',
      'mcp-cross-node': 'expected-fail',
      'flags-converged': 'pass',
      'lb-sticky-reconnect': 'pass',
      'schedule-exactly-once': 'expected-fail',
      'standby-fires-nothing': 'pass',
      'watch-outlives-session': 'expected-fail',
      'mesh-cap-cluster-wide': 'expected-fail',
      'rate-limit-cluster-wide': 'expected-fail',
      'node-kill-reconnect': 'pass',
      'lb-failback-dm': 'pass',
      'clock-leader-kill': 'pass',
      'schedule-firing-node-killed': 'pass',
      'watch-survives': 'expected-fail',
      'presence-after-shutdown': 'n/a',
      [ONE_REGION_NA]: 'n/a',
    });
    // An expected failure prints the gap it documents; a killed node is back and healthy afterwards.
    expect(result.stdout).toMatch(/expected-fail\s+mesh-cap-cluster-wide.*each node counts its own sessions/);
    expect(result.stdout).toMatch(/pass\s+node-kill-reconnect.*reconnected with every message \d+ ms after/);
    // Each line names the row it checks as the flag registry does. After the fail-back, new peers through
    // the load balancer reached the old ones (the load balancer follows the active lease).
    expect(result.stdout).toMatch(
      /pass\s+lb-failback-dm\s+\d+ ms {2}background work on a warm standby: broker-\d killed, its peers on broker-\d .*reached them/,
    );
    expect(result.stdout).toMatch(
      /expected-fail\s+watch-outlives-session\s+\d+ ms {2}urlWatches: a watch ends with/,
    );
    expect(result.stdout).toContain('every expectation met');
    const cluster1 = JSON.parse(readFileSync(join(cwd, '.workbench', 'cluster.json'), 'utf8'));
    for (const node of cluster1.nodes) expect((await fetch(`${node.url}/health`)).status).toBe(200);
    await runWorkbench(['down'], {}, cwd); // done with it: fewer processes for the tests that follow
  }, 150_000);

  it('phase 3: every check passes (but the standby check: no standby); judged by phase 1 expectations, the closed gaps are reported and the run fails', async () => {
    const cwd = await cluster(3);
    const result = await runWorkbench(['smoke', '--phase', '3'], {}, cwd);
    expect(result.code, result.stdout).toBe(0);
    expect(lines(result.stdout)).toHaveLength(CHECKS.length);
    // Shared schedules run on every node with per-occurrence claims (docs/active-lease.md): nothing to check.
    const byCheck = outcomes(result.stdout);
    expect(byCheck['standby-fires-nothing']).toBe('n/a');
    expect(byCheck[ONE_REGION_NA]).toBe('n/a');
    // Phase 3's load balancer spreads WebSockets and sets no cookie: no stickiness to check.
    expect(byCheck[NO_STICKY_COOKIE]).toBe('skipped');
    const notChecked = ['standby-fires-nothing', ONE_REGION_NA, NO_STICKY_COOKIE];
    expect(
      Object.entries(byCheck).filter(([name, outcome]) => !notChecked.includes(name) && outcome !== 'pass'),
    ).toEqual([]);
    // The checks leave nothing behind in the environment: the watch check deleted its watch.
    const { db } = started.find((entry) => entry.cwd === cwd)!;
    const watches = await db.query('SELECT count(*)::int AS n FROM watches WHERE deleted_at IS NULL');
    expect(watches.rows[0]?.n).toBe(0);
    const strict = await runWorkbench(
      [
        'smoke',
        '--phase',
        '1',
        '--only',
        'cross-node-dm,cross-node-stream,mesh-cap-cluster-wide,flags-converged',
      ],
      {},
      cwd,
    );
    expect(strict.code).toBe(1);
    expect(lines(strict.stdout)).toHaveLength(4);
    expect(strict.stdout).toContain('the gap is gone, update the expectations');
    expect(strict.stdout).toContain(
      '3 expectation(s) not met: cross-node-dm, cross-node-stream, mesh-cap-cluster-wide',
    );
    // The same judgement for a machine: JSON lines and JUnit XML, the missed expected failure a failure.
    const report = join(cwd, 'smoke.xml');
    const machine = await runWorkbench(
      ['smoke', '--phase', '1', '--only', 'cross-node-dm,flags-converged', '--json', '--junit', report],
      {},
      cwd,
    );
    expect(machine.code).toBe(1);
    const events = machine.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(events.map((event) => [event.type, event.name ?? null])).toEqual([
      ['start', null],
      ['check', 'cross-node-dm'],
      ['check', 'flags-converged'],
      ['summary', null],
    ]);
    expect(events[1]).toMatchObject({ outcome: 'pass', expected: 'expected-fail', met: false });
    expect(events[3]).toMatchObject({ met: false, unmet: ['cross-node-dm'] });
    const [suite] = await readJunit(report);
    expect(suite).toMatchObject({ name: 'smoke phase 1 (phase3)', tests: 2, failures: 1, skipped: 0 });
    expect(suite!.cases[0]!.failure).toMatchObject({ type: 'missed-expected-failure' });
    expect(suite!.cases[0]!.failure!.message).toContain('the gap is gone, update the expectations');
    expect(suite!.cases[1]!.failure).toBeUndefined();
    const unknown = await runWorkbench(['smoke', '--phase', '3', '--only', 'cross-node-dn'], {}, cwd);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('unknown check "cross-node-dn"');
  }, 150_000);

  it('phase 0 (one broker): every cross-node check is n/a, flags converge, a watch ends with its session, every expectation met', async () => {
    const cwd = await cluster(0);
    const result = await runWorkbench(['smoke', '--phase', '0'], {}, cwd);
    expect(result.code, result.stdout).toBe(0);
    const byCheck = outcomes(result.stdout);
    expect(Object.keys(byCheck).sort()).toEqual([...CHECKS].sort());
    const onOneNode: Record<string, string> = {
      'flags-converged': 'pass',
      'lb-sticky-reconnect': 'pass',
      'watch-outlives-session': 'expected-fail',
    };
    for (const [check, outcome] of Object.entries(byCheck))
      expect(outcome, check).toBe(onOneNode[check] ?? 'n/a');
    await runWorkbench(['down'], {}, cwd);
  }, 60_000);

  it.each([2, 4])(
    'phase %i: each check meets its expectation, as the phase folder states it',
    async (phase) => {
      const cwd = await cluster(phase);
      const result = await runWorkbench(['smoke', '--phase', String(phase)], {}, cwd);
      expect(result.code, result.stdout).toBe(0);
      const expectations = JSON.parse(
        readFileSync(join(import.meta.dirname, '../../phases', `phase${phase}`, 'expectations.json'), 'utf8'),
      ).checks as Record<string, { expect: string }>;
      expect(outcomes(result.stdout)).toEqual(
        Object.fromEntries(
          Object.entries(expectations).map(([check, { expect }]) => [
            check,
            phase < 4 && check === ONE_REGION_NA
              ? 'n/a'
              : check === NO_STICKY_COOKIE && expect === 'n/a'
                ? 'skipped'
                : expect,
          ]),
        ),
      );
      if (phase === 2)
        expect(result.stdout).toMatch(/expected-fail\s+watch-survives.*shared watches close it/);
      await runWorkbench(['down'], {}, cwd);
    },
    // Phase 4: the simulation's start (a primary, a replica through the link, two regions) and its
    // cross-region round trips on top of the checks.
    300_000,
  );

  it('status: shows every node, their flags, ownership and chain health of the running cluster', async () => {
    const cwd = started.find(({ cwd }) => cwd.includes('wb-smoke-3-'))!.cwd; // the phase 3 cluster above
    const result = await runWorkbench(['status'], {}, cwd);
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.stdout).toContain('phase 3 (phase3)');
    for (const id of ['broker-1', 'broker-2', 'broker-3'])
      expect(result.stdout).toMatch(
        new RegExp(`${id}\\s+ok\\s+background (active|standby)\\s+flags as desired`),
      );
    expect(result.stdout).toMatch(/active lease: broker-\d \(epoch \d+\)/);
    expect(result.stdout).toMatch(/audit chains: \d+ intact, 0 broken/);
    const json = JSON.parse((await runWorkbench(['status', '--json'], {}, cwd)).stdout);
    expect(json.nodes).toHaveLength(3);
    expect(json.nodes.map((node: { disagreements: string[] }) => node.disagreements)).toEqual([[], [], []]);
  });

  it('an environment file: smoke and status reach the same cluster from elsewhere, killing nodes through its commands', async () => {
    const clusterCwd = started.find(({ cwd }) => cwd.includes('wb-smoke-3-'))!.cwd;
    const cluster3 = JSON.parse(readFileSync(join(clusterCwd, '.workbench', 'cluster.json'), 'utf8'));
    const operator = mkdtempSync(join(tmpdir(), 'wb-operator-'));
    started.push({ cwd: operator, db: { drop: async () => {} } as TestDatabase });
    const node = (action: string) =>
      `cd '${clusterCwd}' && '${process.execPath}' '${WORKBENCH}' node ${action} {node}`;
    const file = writeEnvironmentFile(operator, 'phase3', {
      phase: 3,
      lbUrl: cluster3.lb.url,
      nodes: cluster3.nodes.map(({ id, url }: { id: string; url: string }) => ({ id, url })),
      databaseUrlEnv: 'PHASE3_DATABASE_URL',
      adminTokenEnv: 'PHASE3_ADMIN_TOKEN',
      flags: { provider: 'file', dir: cluster3.flagsDir },
      control: { kill: node('kill'), stop: node('stop'), start: node('start') },
    });
    const secrets = { PHASE3_DATABASE_URL: cluster3.databaseUrl, PHASE3_ADMIN_TOKEN: cluster3.adminToken };
    const only = 'cross-node-dm,audit-chain-intact,node-kill-reconnect';
    const result = await runWorkbench(
      ['smoke', '--phase', '3', '--env', 'phase3', '--only', only],
      secrets,
      operator,
    );
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(outcomes(result.stdout)).toEqual({
      'cross-node-dm': 'pass',
      'audit-chain-intact': 'pass',
      'node-kill-reconnect': 'pass',
    });
    // Without control in the file (production), the node-failure checks are skipped, visibly, and the run
    // still meets its expectations.
    const { control: _, ...uncontrolled } = JSON.parse(readFileSync(file, 'utf8'));
    writeEnvironmentFile(operator, 'phase3', uncontrolled);
    const skipped = await runWorkbench(
      ['smoke', '--phase', '3', '--env', 'phase3', '--only', 'node-kill-reconnect,cross-node-dm'],
      secrets,
      operator,
    );
    expect(skipped.code, skipped.stdout).toBe(0);
    expect(outcomes(skipped.stdout)).toEqual({ 'cross-node-dm': 'pass', 'node-kill-reconnect': 'skipped' });
    expect(skipped.stdout).toContain('no control');
    // Promotion through the file: the environment is at phase 3 already; its policy blocks a move to 2.
    const same = await runWorkbench(['promote', '--env', 'phase3', '--to', '3'], secrets, operator);
    expect(same.code).toBe(3); // blocked, nothing changed
    expect(same.stdout).toContain('blocked, nothing changed: already at phase 3');
    writeFileSync(
      file,
      JSON.stringify({ ...JSON.parse(readFileSync(file, 'utf8')), requirePassedIn: 'staging' }),
    );
    const policy = await runWorkbench(['promote', '--env', 'phase3', '--to', '2'], secrets, operator);
    expect(policy.code).toBe(3);
    expect(policy.stdout).toContain('policy: phase 2 has not passed in staging yet');
    // Flags of the environment through its file: its provider, its database, its nodes.
    const listed = await runWorkbench(['flags', 'list', '--env', 'phase3', '--json'], secrets, operator);
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout).nodes).toEqual(['broker-1', 'broker-2', 'broker-3']);
    const status = await runWorkbench(['status', '--env', 'phase3'], secrets, operator);
    expect(status.code, status.stdout + status.stderr).toBe(0);
    expect(status.stdout).toMatch(/broker-1\s+ok/);
    // Without the secret's variable, the file names it and nothing runs.
    const missing = await runWorkbench(['smoke', '--phase', '3', '--env', 'phase3'], {}, operator);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('PHASE3_DATABASE_URL is not set');
  }, 60_000);
});
