import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { auditHash, GENESIS } from '../../broker/audit/chain.js';
import { MAX_ROWS_PER_PASS } from '../../cli/verifier/follow.js';
import { runWorkbench } from '../helpers/cli.js';
import { inOperatorDir, writeEnvironmentFile } from '../helpers/environments.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import {
  scrape,
  seriesValue,
  startVerifier,
  untilSeries,
  type VerifierProcess,
} from '../helpers/verifier.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
const running: VerifierProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase('audit_verifier');
});
afterEach(async () => {
  await Promise.all(running.splice(0).map((v) => v.stop()));
});
afterAll(async () => {
  await db?.drop();
});

/** Appends a correctly hashed row after `prev` (GENESIS for the first), as a writer would. */
async function append(meshId: string, seq: number, prevHash: string, note = `e${seq}`): Promise<string> {
  const row = {
    meshId,
    seq,
    prevHash,
    eventType: 'test.event',
    actor: 'tester',
    payload: { note },
    createdAt: new Date(Math.floor(Date.now() / 1000) * 1000 + seq),
  };
  const hash = auditHash(row);
  await db.query(
    `INSERT INTO audit_log (mesh_id, seq, prev_hash, hash, event_type, actor, payload, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [meshId, seq, prevHash, hash, row.eventType, row.actor, JSON.stringify(row.payload), row.createdAt],
  );
  return hash;
}

/** Rows `from`..`to`, correctly chained after `prevHash`, committed at once (one statement): a burst. */
async function burst(meshId: string, from: number, to: number, prevHash: string): Promise<string> {
  const columns = {
    seq: [] as number[],
    prev: [] as string[],
    hash: [] as string[],
    payload: [] as string[],
  };
  const createdAt = new Date(Math.floor(Date.now() / 1000) * 1000);
  let hash = prevHash;
  for (let seq = from; seq <= to; seq++) {
    const payload = { note: `burst ${seq}` };
    const next = auditHash({
      meshId,
      seq,
      prevHash: hash,
      eventType: 'test.event',
      actor: 'tester',
      payload,
      createdAt,
    });
    columns.seq.push(seq);
    columns.prev.push(hash);
    columns.hash.push(next);
    columns.payload.push(JSON.stringify(payload));
    hash = next;
  }
  await db.query(
    `INSERT INTO audit_log (mesh_id, seq, prev_hash, hash, event_type, actor, payload, created_at)
     SELECT $1, seq, prev, hash, 'test.event', 'tester', payload, $6
       FROM unnest($2::int[], $3::text[], $4::text[], $5::jsonb[]) AS r(seq, prev, hash, payload)`,
    [meshId, columns.seq, columns.prev, columns.hash, columns.payload, createdAt],
  );
  return hash;
}

async function chain(meshId: string, from: number, to: number, prevHash: string): Promise<string> {
  let hash = prevHash;
  for (let seq = from; seq <= to; seq++) hash = await append(meshId, seq, hash);
  return hash;
}

const until = (verifier: VerifierProcess, name: string, mesh: string, expected: number) =>
  untilSeries(verifier, name, mesh, expected, 10_000);

describe('workbench audit verify --env E', () => {
  it("verifies environment E's database with nothing but its database URL variable set", async () => {
    const mesh = randomUUID();
    await chain(mesh, 1, 4, GENESIS);
    await inOperatorDir('audit-env-', async (cwd) => {
      writeEnvironmentFile(cwd, 'staging', {
        phase: 3,
        lbUrl: 'http://127.0.0.1:1',
        nodes: [{ id: 'n1', url: 'http://127.0.0.1:2' }],
        databaseUrlEnv: 'STAGING_DATABASE_URL',
        adminTokenEnv: 'STAGING_ADMIN_TOKEN',
        flags: {
          provider: 'unleash',
          url: 'http://127.0.0.1:3/api',
          tokenEnv: 'STAGING_UNLEASH_TOKEN',
          unleashEnvironment: 'development',
        },
      });
      // Neither the admin token nor the Unleash token is set: the verifier reads Postgres only.
      const ok = await runWorkbench(
        ['audit', 'verify', '--env', 'staging', '--mesh', mesh, '--json'],
        { STAGING_DATABASE_URL: db.url, DATABASE_URL: '' },
        cwd,
      );
      expect(ok.code, ok.stderr).toBe(0);
      expect(JSON.parse(ok.stdout)).toMatchObject({ valid: true, meshes: [{ meshId: mesh }] });

      const unset = await runWorkbench(['audit', 'verify', '--env', 'staging'], { DATABASE_URL: '' }, cwd);
      expect(unset.code).not.toBe(0);
      expect(unset.stderr).toContain('STAGING_DATABASE_URL is not set');

      const both = await runWorkbench(
        ['audit', 'verify', '--env', 'staging', '--database-url', db.url],
        { STAGING_DATABASE_URL: db.url },
        cwd,
      );
      expect(both.code).toBe(2);
      expect(both.stderr).toContain('--env and --database-url');
    });
  }, 60_000);
});

describe('workbench audit verify --follow (the independent verifier)', () => {
  it('refuses bad arguments with exit code 2', async () => {
    for (const args of [
      ['--follow', '--interval-ms', '0'],
      ['--follow', '--interval-ms', 'soon'],
      ['--follow', '--metrics-port', '70000'],
      ['--follow', '--json'],
      ['--interval-ms', '100'],
      ['--metrics-port', '9464'],
    ]) {
      const result = await runWorkbench(['audit', 'verify', ...args, '--database-url', db.url]);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toMatch(/workbench audit: .*(--interval-ms|--metrics-port|--json|--follow)/);
    }
    // Six process starts: on shared cores each can take seconds.
  }, 90_000);

  it('follows the chain as rows are appended, remembers how far it got, and names tampered rows', async () => {
    const mesh = randomUUID();
    let head = await chain(mesh, 1, 3, GENESIS);
    const verifier = await startVerifier(db.url, ['--interval-ms', '100', '--rescan-ms', '1000']);
    running.push(verifier);
    await until(verifier, 'mesh_broker_audit_verifier_verified_seq', mesh, 3);
    const text = await scrape(verifier.url);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_lag_rows', { mesh })).toBe(0);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_breaks', { mesh })).toBe(0);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_forks', { mesh })).toBe(0);
    expect(text).toMatch(/mesh_broker_audit_verifier_verified_seq\{mesh="[^"]+",node="verifier-\d+"\} 3/);

    head = await chain(mesh, 4, 6, head);
    await until(verifier, 'mesh_broker_audit_verifier_verified_seq', mesh, 6);
    const progress = await db.query(
      'SELECT verified_seq, verified_hash FROM audit_verifier_progress WHERE mesh_id = $1',
      [mesh],
    );
    expect(progress.rows[0]).toMatchObject({ verified_seq: 6, verified_hash: head });

    // A row appended with a wrong link is found by the incremental walk alone.
    await append(mesh, 7, 'f'.repeat(64));
    await until(verifier, 'mesh_broker_audit_verifier_breaks', mesh, 1);
    await verifier.printed(/BREAK {2}mesh \S+ seq 7 .*prevHash is not the hash of a row at seq 6/);

    // A row it already verified, rewritten behind the append-only trigger: found by the rescan.
    await db.query('ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only');
    try {
      await db.query(`UPDATE audit_log SET payload = '{"note":"rewritten"}' WHERE mesh_id = $1 AND seq = 2`, [
        mesh,
      ]);
    } finally {
      await db.query('ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only');
    }
    await until(verifier, 'mesh_broker_audit_verifier_breaks', mesh, 2);
    await verifier.printed(/rescan from genesis: 2 broken rows/);
    // Counted once the rescan pass ends, a moment after the gauges it set.
    await waitFor(
      async () =>
        (seriesValue(await scrape(verifier.url), 'mesh_broker_audit_verifier_passes_total', {
          kind: 'rescan',
        }) ?? 0) > 0,
      { what: 'a rescan pass counted' },
    );
    expect(await verifier.stop()).toBe(0);
  });

  it('sees a deleted tail while it runs even without a checkpoint file, and its verified seq does not go back', async () => {
    const mesh = randomUUID();
    const ten = await chain(mesh, 1, 10, GENESIS);
    const twelve = await chain(mesh, 11, 12, ten);
    const verifier = await startVerifier(db.url, [
      '--interval-ms',
      '100',
      '--rescan-ms',
      '300',
      '--mesh',
      mesh,
    ]);
    running.push(verifier);
    await until(verifier, 'mesh_broker_audit_verifier_verified_seq', mesh, 12);

    await db.query('ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only');
    try {
      await db.query('DELETE FROM audit_log WHERE mesh_id = $1 AND seq > 10', [mesh]);
    } finally {
      await db.query('ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only');
    }
    // The next writer takes seq 11 again, linked to seq 10: the chain verifies from genesis.
    await append(mesh, 11, ten, 'after the deletion');
    const rescans = async () =>
      seriesValue(await scrape(verifier.url), 'mesh_broker_audit_verifier_passes_total', {
        kind: 'rescan',
      }) ?? 0;
    const from = await rescans();
    await waitFor(async () => (await rescans()) >= from + 2, { timeoutMs: 10_000, what: 'two rescans' });
    const text = await scrape(verifier.url);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_verified_seq', { mesh })).toBe(12);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_checkpoint_broken', { mesh })).toBe(1);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_breaks', { mesh })).toBe(1);
    await verifier.printed(
      `BREAK  mesh ${mesh} seq 12 (row id 0): mesh ${mesh}: chain shorter than the checkpoint: the checkpoint says seq 12 has hash ${twelve}`,
    );
  });

  it('reports a fork per mesh, and a restarted verifier goes on from its table', async () => {
    const mesh = randomUUID();
    const one = await chain(mesh, 1, 1, GENESIS);
    await chain(mesh, 2, 3, one);
    const first = await startVerifier(db.url, ['--interval-ms', '100', '--mesh', mesh]);
    running.push(first);
    await until(first, 'mesh_broker_audit_verifier_verified_seq', mesh, 3);
    expect(await first.stop()).toBe(0);

    // While no verifier runs: a second writer with a stale head appends at seq 2 (a fork), and the chain
    // goes on.
    await append(mesh, 2, one, 'other branch');
    const top = await db.query<{ hash: string }>(
      'SELECT hash FROM audit_log WHERE mesh_id = $1 AND seq = 3',
      [mesh],
    );
    await chain(mesh, 4, 5, top.rows[0]!.hash);

    const second = await startVerifier(db.url, ['--interval-ms', '100', '--mesh', mesh]);
    running.push(second);
    await until(second, 'mesh_broker_audit_verifier_verified_seq', mesh, 5);
    const text = await scrape(second.url);
    // The late row sits behind the level it resumed at (3): incremental passes read from there on, so
    // only a rescan from genesis can see that branch.
    expect(seriesValue(text, 'mesh_broker_audit_verifier_breaks', { mesh })).toBe(0);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_forks', { mesh })).toBe(0);
    await second.stop();
    const third = await startVerifier(db.url, ['--interval-ms', '100', '--rescan-ms', '200', '--mesh', mesh]);
    running.push(third);
    await until(third, 'mesh_broker_audit_verifier_forks', mesh, 1);
    expect(seriesValue(await scrape(third.url), 'mesh_broker_audit_verifier_breaks', { mesh })).toBe(0);
    await third.printed(/FORK/);
  });

  it('counts each fork found once: not again on a rescan, nor after a restart (MeshAuditChainForked reads it)', async () => {
    const FOUND = 'mesh_broker_audit_verifier_forks_found_total';
    const mesh = randomUUID();
    const one = await chain(mesh, 1, 1, GENESIS);
    await chain(mesh, 2, 3, one);
    await append(mesh, 2, one, 'other branch'); // a fork already there when the verifier first looks
    const rescans = async (verifier: VerifierProcess, atLeast: number) =>
      waitFor(
        async () =>
          (seriesValue(await scrape(verifier.url), 'mesh_broker_audit_verifier_passes_total', {
            kind: 'rescan',
          }) ?? 0) >= atLeast,
        { timeoutMs: 10_000, what: `${atLeast} rescans\n${verifier.output()}` },
      );

    const first = await startVerifier(db.url, ['--interval-ms', '100', '--rescan-ms', '200', '--mesh', mesh]);
    running.push(first);
    await until(first, 'mesh_broker_audit_verifier_forks', mesh, 1);
    // Rescans from genesis find the same fork again and again: still one found.
    await rescans(first, 3);
    expect(seriesValue(await scrape(first.url), FOUND, { mesh })).toBe(1);
    expect(await first.stop()).toBe(0);

    // A restart goes on from audit_verifier_progress, which knows the fork: the new process counts from 0
    // and the old fork is not found again, by its passes nor by its rescans.
    const second = await startVerifier(db.url, [
      '--interval-ms',
      '100',
      '--rescan-ms',
      '200',
      '--mesh',
      mesh,
    ]);
    running.push(second);
    await rescans(second, 3);
    let text = await scrape(second.url);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_forks', { mesh })).toBe(1);
    expect(seriesValue(text, FOUND, { mesh })).toBe(0);

    // A new fork at the head (a second row at seq 3, on the same parent): counted once.
    const two = await db.query<{ hash: string }>(
      'SELECT hash FROM audit_log WHERE mesh_id = $1 AND seq = 2 ORDER BY id LIMIT 1',
      [mesh],
    );
    await append(mesh, 3, two.rows[0]!.hash, 'a second head');
    await until(second, FOUND, mesh, 1);
    await rescans(second, 6);
    text = await scrape(second.url);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_forks', { mesh })).toBe(2);
    expect(seriesValue(text, FOUND, { mesh })).toBe(1);
  });
  it('shows the rows a burst left waiting as lag, then 0 once the passes caught up (MeshAuditVerifierLagging reads it)', async () => {
    const LAG = 'mesh_broker_audit_verifier_lag_rows';
    const VERIFIED = 'mesh_broker_audit_verifier_verified_seq';
    const mesh = randomUUID();
    const three = await chain(mesh, 1, 3, GENESIS);
    // Passes a second apart: the figures of each pass stay on /metrics long enough to be read.
    const verifier = await startVerifier(db.url, [
      '--interval-ms',
      '1000',
      '--rescan-ms',
      '600000',
      '--mesh',
      mesh,
    ]);
    running.push(verifier);
    await until(verifier, VERIFIED, mesh, 3);

    const head = 3 + 2 * MAX_ROWS_PER_PASS + 500;
    await burst(mesh, 4, head, three);
    const first = await waitFor(
      async () => {
        const text = await scrape(verifier.url);
        const verified = seriesValue(text, VERIFIED, { mesh }) ?? 0;
        return verified > 3 ? { verified, lag: seriesValue(text, LAG, { mesh }) } : undefined;
      },
      { timeoutMs: 30_000, what: `a pass after the burst\n${verifier.output()}` },
    );
    // A pass reads at most MAX_ROWS_PER_PASS rows; the rest of the burst is what the gauge shows.
    expect(first.verified).toBeLessThanOrEqual(3 + MAX_ROWS_PER_PASS);
    expect(first.lag).toBe(head - first.verified);
    expect(first.lag).toBeGreaterThan(0);

    await waitFor(async () => seriesValue(await scrape(verifier.url), VERIFIED, { mesh }) === head, {
      timeoutMs: 60_000,
      what: `${VERIFIED} = ${head}\n${verifier.output()}`,
    });
    expect(seriesValue(await scrape(verifier.url), LAG, { mesh })).toBe(0);
    expect(seriesValue(await scrape(verifier.url), 'mesh_broker_audit_verifier_breaks', { mesh })).toBe(0);
  }, 120_000);

  it('takes a fork row committed after its seq was verified as a fork, not a break; a link to no row is still a break', async () => {
    const mesh = randomUUID();
    const two = await chain(mesh, 1, 2, GENESIS);
    const three = await append(mesh, 3, two);
    await append(mesh, 4, three);
    const verifier = await startVerifier(db.url, [
      '--interval-ms',
      '100',
      '--rescan-ms',
      '1000',
      '--mesh',
      mesh,
    ]);
    running.push(verifier);
    await until(verifier, 'mesh_broker_audit_verifier_verified_seq', mesh, 4);

    // What a writer without ha.audit leaves behind: a second row at seq 3 (on the same parent), seen by
    // no pass (they read from seq 4 on), and a row linking to it: a second row at seq 4.
    const lateThree = await append(mesh, 3, two, 'late branch');
    await append(mesh, 4, lateThree, 'late branch goes on');
    // Both are rows at a taken seq: two forks, as the rescan from genesis counts them.
    await until(verifier, 'mesh_broker_audit_verifier_forks', mesh, 2);
    let text = await scrape(verifier.url);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_breaks', { mesh })).toBe(0);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_forks_found_total', { mesh })).toBe(2);
    await verifier.printed(/FORK {2}mesh \S+ seq 3 .*committed after seq 3 was verified/);

    // The rescan from genesis finds the same: nothing to say about verified rows being changed.
    const rescans = async () =>
      seriesValue(await scrape(verifier.url), 'mesh_broker_audit_verifier_passes_total', {
        kind: 'rescan',
      }) ?? 0;
    const from = await rescans();
    await waitFor(async () => (await rescans()) >= from + 1, { timeoutMs: 10_000, what: 'a rescan' });
    text = await scrape(verifier.url);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_breaks', { mesh })).toBe(0);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_forks', { mesh })).toBe(2);
    expect(verifier.output()).not.toContain('rows already verified were changed');
    expect(verifier.output()).not.toContain('BREAK');

    // A prevHash that is the hash of no row at seq 4: a break.
    await append(mesh, 5, 'e'.repeat(64));
    await until(verifier, 'mesh_broker_audit_verifier_breaks', mesh, 1);
    await verifier.printed(/BREAK {2}mesh \S+ seq 5 .*prevHash is not the hash of a row at seq 4/);
    expect(await verifier.stop()).toBe(0);
  }, 60_000);
  it('takes a link to a verified head row rewritten in place for a break, not a late fork', async () => {
    const mesh = randomUUID();
    const two = await chain(mesh, 1, 2, GENESIS);
    await append(mesh, 3, two);
    const verifier = await startVerifier(db.url, ['--interval-ms', '100', '--mesh', mesh]);
    running.push(verifier);
    await until(verifier, 'mesh_broker_audit_verifier_verified_seq', mesh, 3);

    // Row 3 rewritten behind the append-only trigger, its hash recomputed; the next writer links to it.
    const { rows } = await db.query<{ created_at: Date }>(
      'SELECT created_at FROM audit_log WHERE mesh_id = $1 AND seq = 3',
      [mesh],
    );
    const payload = { note: 'rewritten' };
    const forged = auditHash({
      meshId: mesh,
      seq: 3,
      prevHash: two,
      eventType: 'test.event',
      actor: 'tester',
      payload,
      createdAt: rows[0]!.created_at,
    });
    await db.query('ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only');
    try {
      await db.query('UPDATE audit_log SET payload = $2, hash = $3 WHERE mesh_id = $1 AND seq = 3', [
        mesh,
        JSON.stringify(payload),
        forged,
      ]);
    } finally {
      await db.query('ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only');
    }
    await append(mesh, 4, forged);
    await waitFor(
      () => /BREAK {2}mesh \S+ seq 4 .*verified with another hash: rewritten/.test(verifier.output()),
      {
        timeoutMs: 10_000,
        what: `the break at seq 4\n${verifier.output()}`,
      },
    );
    // The checkpoint (seq 3 with its old hash) no longer holds either: checked after the walk that printed
    // the break, in the same pass, so its gauge follows the line.
    await until(verifier, 'mesh_broker_audit_verifier_checkpoint_broken', mesh, 1);
    expect(seriesValue(await scrape(verifier.url), 'mesh_broker_audit_verifier_forks', { mesh })).toBe(0);
  });
});
