/**
 * Tamper evidence that survives deletion (issue 17, item 5), driven the way an attacker would: real events
 * through a real node over the WebSocket, then a database superuser disables the append-only trigger and
 * deletes or rewrites the newest rows. What is left of the chain verifies on its own; only the verifier's
 * checkpoint, kept in a file outside the database, shows what happened.
 */
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MeshClient } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { auditHash } from '../../broker/audit/chain.js';
import { AUDIT_COLUMNS, type AuditRow } from '../../broker/audit/verify.js';
import { CLUSTER_CHAIN_ID } from '../../flags/changes.js';
import { renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues } from '../../flags/registry.js';
import { runWorkbench } from '../helpers/cli.js';
import { closeAllClients, connectPeer, createMesh, type TestMesh } from '../helpers/mesh.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
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
let node: InProcessNode;
let dir: string;
const running: VerifierProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase('audit_checkpoint');
  dir = mkdtempSync(join(tmpdir(), 'wb-checkpoint-'));
  // The shared writer reads the chain head from the database for every append (phase 3 and on), so after
  // the deletion the next event takes the deleted seq again, exactly as issue 17 found.
  writeFileSync(join(dir, 'audit.json'), renderFlagsDocument({ ...defaultFlagValues(), 'ha.audit': true }));
  node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: {
      FLAGS_DIR: dir,
      FLAGS_ENV: 'audit',
      SEND_BURST: '1000',
      SEND_RATE_PER_MIN: '10000',
    },
  });
});
afterEach(async () => {
  closeAllClients();
  await Promise.all(running.splice(0).map((v) => v.stop()));
});
afterAll(async () => {
  await node?.stop();
  await db?.drop();
  rmSync(dir, { recursive: true, force: true });
});

/** A mesh of two peers whose chain reaches `seq` (two joins, then sends), every row written. */
async function meshWithChain(seq: number): Promise<{ mesh: TestMesh; peer: MeshClient }> {
  const mesh = await createMesh(node, 2);
  const peer = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
  await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
  await sendUntil(mesh, peer, seq);
  return { mesh, peer };
}

async function sendUntil(mesh: TestMesh, peer: MeshClient, seq: number): Promise<void> {
  for (;;) {
    // audit.verify waits for the node's queued appends, so the rows are in once it answers.
    const { entries } = await peer.request<{ type: string; entries: number }>({ type: 'audit.verify' });
    const head = await headOf(mesh.meshId);
    if (head.seq >= seq) {
      expect(head.seq, `${entries} entries`).toBe(seq);
      return;
    }
    await peer.send(mesh.members[1]!.pubkey, 'hello');
  }
}

async function headOf(meshId: string): Promise<{ seq: number; hash: string }> {
  const { rows } = await db.query<{ seq: number; hash: string }>(
    'SELECT seq, hash FROM audit_log WHERE mesh_id = $1 ORDER BY seq DESC, id DESC LIMIT 1',
    [meshId],
  );
  return rows[0] ?? { seq: 0, hash: '' };
}

/** As a superuser: the append-only trigger off, `statement`, the trigger on again. */
async function behindTheTrigger(statement: () => Promise<unknown>): Promise<void> {
  await db.query('ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only');
  try {
    await statement();
  } finally {
    await db.query('ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only');
  }
}

const deleteNewest = (meshId: string, fromSeq: number) =>
  behindTheTrigger(() =>
    db.query('DELETE FROM audit_log WHERE mesh_id = $1 AND seq >= $2', [meshId, fromSeq]),
  );

/**
 * The stronger attacker: rewrites one row and recomputes every hash after it (the hash function is
 * public), so the chain verifies again from genesis to its head.
 */
async function rewriteAndRecompute(meshId: string, seq: number): Promise<void> {
  const { rows } = await db.query<AuditRow>(
    `SELECT ${AUDIT_COLUMNS} FROM audit_log WHERE mesh_id = $1 AND seq >= $2 ORDER BY seq, id`,
    [meshId, seq - 1],
  );
  let prevHash = rows[0]!.hash;
  await behindTheTrigger(async () => {
    for (const row of rows.slice(1)) {
      const payload = row.seq === seq ? { ...(row.payload as object), recipients: 0 } : row.payload;
      const hash = auditHash({ ...row, prevHash, payload });
      await db.query('UPDATE audit_log SET prev_hash = $2, hash = $3, payload = $4 WHERE id = $1', [
        row.id,
        prevHash,
        hash,
        JSON.stringify(payload),
      ]);
      prevHash = hash;
    }
  });
}

const verify = (...args: string[]) => runWorkbench(['audit', 'verify', '--database-url', db.url, ...args]);

function checkpointOf(file: string): Record<string, { seq: number; hash: string }> {
  return JSON.parse(readFileSync(file, 'utf8')).meshes;
}

const until = (verifier: VerifierProcess, name: string, mesh: string, expected: number) =>
  untilSeries(verifier, name, mesh, expected, 15_000);

describe('the audit verifier checkpoint (tamper evidence that survives deletion)', () => {
  it('workbench audit verify --checkpoint: a chain whose newest rows were deleted is broken, also once new events reuse their seq', async () => {
    const { mesh, peer } = await meshWithChain(12);
    const meshId = mesh.meshId;
    const file = join(dir, 'tail.json');

    const first = await verify('--mesh', meshId, '--checkpoint', file);
    expect(first.code, first.stdout + first.stderr).toBe(0);
    expect(first.stdout).toContain(`checkpoint ${file}: no such file yet, starting fresh`);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const twelve = await headOf(meshId);
    expect(checkpointOf(file)[meshId]).toEqual({ seq: 12, hash: twelve.hash });

    await deleteNewest(meshId, 11);
    const ten = await headOf(meshId);
    // The chain alone cannot tell: what is left links from genesis to seq 10.
    expect((await verify('--mesh', meshId)).code).toBe(0);

    const after = await verify('--mesh', meshId, '--checkpoint', file);
    expect(after.code, after.stdout + after.stderr).toBe(1);
    expect(after.stdout).toContain(`BROKEN  ${meshId}`);
    expect(after.stdout).toContain(
      `checkpoint: mesh ${meshId}: chain shorter than the checkpoint: the checkpoint says seq 12 has hash ${twelve.hash}, but the chain ends at seq 10 (hash ${ten.hash}): its newest rows were deleted`,
    );
    // A broken mesh's checkpoint stays put, so the break is reported on every run.
    expect(checkpointOf(file)[meshId]).toEqual({ seq: 12, hash: twelve.hash });

    // The next event takes seq 11 again and links to seq 10: still shorter than the checkpoint.
    await sendUntil(mesh, peer, 11);
    expect((await verify('--mesh', meshId)).code).toBe(0);
    const json = await verify('--mesh', meshId, '--checkpoint', file, '--json');
    expect(json.code).toBe(1);
    const report = JSON.parse(json.stdout);
    expect(report.valid).toBe(false);
    expect(report.meshes[0].checkpoint).toMatchObject({
      holds: false,
      problem: 'shorter',
      found: { head: { seq: 11 } },
    });

    // The chain grows past the checkpoint again: the row at seq 12 is not the one the verifier saw.
    await sendUntil(mesh, peer, 13);
    const regrown = await verify('--mesh', meshId, '--checkpoint', file);
    expect(regrown.code).toBe(1);
    const now12 = (
      await db.query<{ hash: string }>('SELECT hash FROM audit_log WHERE mesh_id = $1 AND seq = 12', [meshId])
    ).rows[0]!.hash;
    expect(regrown.stdout).toContain(
      `chain diverges from the checkpoint: the checkpoint says seq 12 has hash ${twelve.hash}, but the row at seq 12 has hash ${now12}`,
    );

    // Every row gone: the mesh is not in the table any more, but the checkpoint remembers it.
    await deleteNewest(meshId, 1);
    const gone = await verify('--checkpoint', file);
    expect(gone.code).toBe(1);
    expect(gone.stdout).toContain(`BROKEN  ${meshId}  0 entries`);
    expect(gone.stdout).toContain('but the mesh has no audit rows left: its newest rows were deleted');
  }, 90_000);

  it('workbench audit verify --checkpoint: a chain recomputed from a rewritten row on diverges from the checkpoint', async () => {
    const { mesh } = await meshWithChain(6);
    const meshId = mesh.meshId;
    const file = join(dir, 'rewrite.json');
    expect((await verify('--mesh', meshId, '--checkpoint', file)).code).toBe(0);
    const seen = await headOf(meshId);

    await rewriteAndRecompute(meshId, 4);
    const rewritten = await headOf(meshId);
    expect(rewritten.seq).toBe(6);
    expect(rewritten.hash).not.toBe(seen.hash);
    // Every hash and link holds again: without the checkpoint the rewrite is invisible.
    expect((await verify('--mesh', meshId)).code).toBe(0);

    const result = await verify('--mesh', meshId, '--checkpoint', file);
    expect(result.code, result.stdout + result.stderr).toBe(1);
    expect(result.stdout).toContain(`BROKEN  ${meshId}`);
    expect(result.stdout).toContain(
      `checkpoint: mesh ${meshId}: chain diverges from the checkpoint: the checkpoint says seq 6 has hash ${seen.hash}, but the row at seq 6 has hash ${rewritten.hash}: rows up to it were rewritten or removed`,
    );
    expect(checkpointOf(file)[meshId]).toEqual(seen);
  }, 60_000);

  it('workbench audit verify --follow --checkpoint: the deleted tail shows in the metrics, survives a restart, and the verified seq never goes back', async () => {
    const { mesh, peer } = await meshWithChain(12);
    const meshId = mesh.meshId;
    const file = join(dir, 'follow.json');
    const args = ['--interval-ms', '100', '--rescan-ms', '300', '--mesh', meshId, '--checkpoint', file];
    const verifier = await startVerifier(db.url, args);
    running.push(verifier);
    await until(verifier, 'mesh_broker_audit_verifier_verified_seq', meshId, 12);
    await until(verifier, 'mesh_broker_audit_verifier_checkpoint_broken', meshId, 0);
    await verifier.printed(`checkpoint ${file}: no such file yet, starting fresh`);
    const twelve = await headOf(meshId);
    // Written at the end of the pass that moved it (after the gauges): waited for, missing at first.
    await waitFor(() => existsSync(file) && checkpointOf(file)[meshId]?.seq === 12, {
      what: 'the checkpoint file at seq 12',
    });
    expect(checkpointOf(file)[meshId]).toEqual({ seq: 12, hash: twelve.hash });
    expect(statSync(file).mode & 0o777).toBe(0o600);

    // Watch the verified seq the whole time the attack goes on.
    const seen: number[] = [];
    const sample = () =>
      scrape(verifier.url).then(
        (text) => {
          const value = seriesValue(text, 'mesh_broker_audit_verifier_verified_seq', { mesh: meshId });
          if (value !== undefined) seen.push(value);
        },
        () => {}, // a scrape still out when the watch ends
      );
    const watcher = setInterval(() => void sample(), 50);

    await deleteNewest(meshId, 11);
    await until(verifier, 'mesh_broker_audit_verifier_checkpoint_broken', meshId, 1);
    await verifier.printed(
      `BREAK  mesh ${meshId} seq 12 (row id 0): mesh ${meshId}: chain shorter than the checkpoint: the checkpoint says seq 12 has hash ${twelve.hash}, but the chain ends at seq 10`,
    );
    // The next event reuses seq 11; rescans walk the shortened chain from genesis.
    await sendUntil(mesh, peer, 11);
    const rescans = () =>
      scrape(verifier.url).then((text) =>
        seriesValue(text, 'mesh_broker_audit_verifier_passes_total', { kind: 'rescan' }),
      );
    const from = (await rescans()) ?? 0;
    await waitFor(async () => ((await rescans()) ?? 0) >= from + 2, {
      timeoutMs: 10_000,
      what: 'two rescans',
    });
    clearInterval(watcher);
    await sample(); // and one look after the rescans

    const text = await scrape(verifier.url);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_checkpoint_broken', { mesh: meshId })).toBe(1);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_checkpoint_seq', { mesh: meshId })).toBe(12);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_verified_seq', { mesh: meshId })).toBe(12);
    expect(seriesValue(text, 'mesh_broker_audit_verifier_breaks', { mesh: meshId })).toBeGreaterThanOrEqual(
      1,
    );
    expect(seen.length).toBeGreaterThan(5);
    expect(Math.min(...seen)).toBe(12);
    expect(checkpointOf(file)[meshId]).toEqual({ seq: 12, hash: twelve.hash });
    expect(await verifier.stop()).toBe(0);

    // A new verifier process reads the file: the break is there from its first pass.
    const restarted = await startVerifier(db.url, args);
    running.push(restarted);
    await until(restarted, 'mesh_broker_audit_verifier_checkpoint_broken', meshId, 1);
    await restarted.printed(`checkpoint ${file}: 1 mesh`);
    // Exported after the checkpoint's check, in the same pass: waited for too (it never shows less than 12).
    await until(restarted, 'mesh_broker_audit_verifier_verified_seq', meshId, 12);
  }, 60_000);

  it('workbench audit rebaseline after a restore-like truncation: the old checkpoint kept, the re-baseline audited, verify ok again', async () => {
    const { mesh } = await meshWithChain(8);
    const meshId = mesh.meshId;
    const file = join(dir, 'restore.json');
    expect((await verify('--mesh', meshId, '--checkpoint', file)).code).toBe(0);
    const eight = await headOf(meshId);
    // What a restore to an older point leaves: the chain as it was at seq 5.
    await deleteNewest(meshId, 6);
    const five = await headOf(meshId);
    const broken = await verify('--mesh', meshId, '--checkpoint', file);
    expect(broken.code).toBe(1);
    expect(broken.stdout).toContain('chain shorter than the checkpoint');
    const before = readFileSync(file, 'utf8');

    const rebaseline = (...args: string[]) =>
      runWorkbench(['audit', 'rebaseline', '--database-url', db.url, ...args]);
    const events = async () =>
      (
        await db.query<{ actor: string; payload: Record<string, unknown> }>(
          `SELECT actor, payload FROM audit_log WHERE mesh_id = $1 AND event_type = 'verifier.rebaselined' ORDER BY seq`,
          [CLUSTER_CHAIN_ID],
        )
      ).rows;
    const keptFiles = () =>
      readdirSync(dir).filter((name) => name.startsWith('restore.json.before-rebaseline-'));

    // Bad input: exit 2, saying what is wrong; the file, the folder and the cluster chain unchanged.
    const corrupt = join(dir, 'restore-corrupt.json');
    writeFileSync(corrupt, '{"version":1,"meshes":', { mode: 0o600 });
    const bad: Array<{ args: string[]; says: string }> = [
      { args: ['--checkpoint', file], says: 'rebaseline needs --reason TEXT' },
      { args: ['--checkpoint', file, '--reason', '  '], says: 'rebaseline needs --reason TEXT' },
      { args: ['--reason', 'restore'], says: 'rebaseline needs --checkpoint FILE' },
      {
        args: ['--checkpoint', file, '--reason', 'restore', '--follow'],
        says: '--follow does not go with rebaseline',
      },
      {
        args: ['--checkpoint', join(dir, 'no-such.json'), '--reason', 'restore'],
        says: 'does not exist: there is nothing to re-baseline',
      },
      { args: ['--checkpoint', corrupt, '--reason', 'restore'], says: 'is not a valid checkpoint: not JSON' },
    ];
    for (const { args, says } of bad) {
      const result = await rebaseline(...args);
      expect(result.code, `${args.join(' ')}: ${result.stdout}${result.stderr}`).toBe(2);
      expect(result.stderr).toContain(says);
    }
    expect(await verify('--reason', 'x')).toMatchObject({ code: 2 });
    // A follow verifier on the database would write its old checkpoint back: refused, exit 1.
    const follower = await startVerifier(db.url, ['--interval-ms', '100', '--mesh', meshId]);
    running.push(follower);
    const followed = await rebaseline('--checkpoint', file, '--reason', 'restore');
    expect(followed.code, followed.stdout + followed.stderr).toBe(1);
    expect(followed.stderr).toContain(
      'an audit verifier (audit verify --follow) is connected to this database: stop it first',
    );
    expect(await follower.stop()).toBe(0);
    expect(readFileSync(file, 'utf8')).toBe(before);
    expect(readFileSync(corrupt, 'utf8')).toBe('{"version":1,"meshes":');
    expect(keptFiles()).toEqual([]);
    expect(await events()).toEqual([]);

    const done = await rebaseline(
      '--checkpoint',
      file,
      '--reason',
      'restored the 02:00 dump (INC-42)',
      '--actor',
      'alice',
    );
    expect(done.code, done.stdout + done.stderr).toBe(0);
    const [kept, ...more] = keptFiles();
    expect(more).toEqual([]);
    expect(done.stdout).toContain(`the old one is kept as ${join(dir, kept!)}`);
    expect(readFileSync(join(dir, kept!), 'utf8')).toBe(before);
    expect(statSync(join(dir, kept!)).mode & 0o777).toBe(0o400);

    // Audited on the cluster chain: who, why, the kept file, the mesh's old and new heads.
    const [event, ...others] = await events();
    expect(others).toEqual([]);
    expect(event!.actor).toBe('alice');
    expect(event!.payload).toMatchObject({
      reason: 'restored the 02:00 dump (INC-42)',
      checkpoint: file,
      keptAs: join(dir, kept!),
    });
    expect(event!.payload.moved).toContainEqual({ meshId, old: eight, new: five });
    expect(done.stdout).toContain('audited: verifier.rebaselined by alice on the cluster chain');

    // The fresh checkpoint starts at the current heads, the cluster chain's past the event itself.
    const cluster = await headOf(CLUSTER_CHAIN_ID);
    expect(checkpointOf(file)[meshId]).toEqual(five);
    expect(checkpointOf(file)[CLUSTER_CHAIN_ID]).toEqual(cluster);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    for (const id of [meshId, CLUSTER_CHAIN_ID]) {
      const ok = await verify('--mesh', id, '--checkpoint', file);
      expect(ok.code, ok.stdout + ok.stderr).toBe(0);
      expect(ok.stdout).toContain(`ok      ${id}`);
    }

    const help = await runWorkbench(['audit', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain(
      'workbench audit rebaseline --checkpoint FILE --reason TEXT [--actor NAME]',
    );
    expect(help.stdout).toMatch(/--reason TEXT\s+rebaseline: why/);
    expect(help.stdout).toMatch(/--actor NAME\s+rebaseline: who/);
  }, 90_000);

  it('refuses a corrupt checkpoint file with exit 2 and changes nothing', async () => {
    const { mesh } = await meshWithChain(3);
    const cases: Array<{ text: string; mode?: number; says: RegExp }> = [
      { text: 'not json{', says: /is not a valid checkpoint: not JSON/ },
      { text: '', says: /is not a valid checkpoint: not JSON/ },
      { text: '{"version":2,"meshes":{}}', says: /is not a valid checkpoint: version is 2, expected 1/ },
      {
        text: JSON.stringify({ version: 1, meshes: { [mesh.meshId]: { seq: -1, hash: 'a'.repeat(64) } } }),
        says: /is not a valid checkpoint: mesh \S+: seq -1 is not a chain position/,
      },
      {
        text: JSON.stringify({ version: 1, meshes: { [mesh.meshId]: { seq: 3, hash: 'nope' } } }),
        says: /is not a valid checkpoint: mesh \S+: hash "nope" is not a SHA-256 hex digest/,
      },
      {
        text: '{"version":1,"meshes":{}}',
        mode: 0o666,
        says: /is writable by others \(mode 666\): chmod 600 it/,
      },
    ];
    for (const [i, { text, mode, says }] of cases.entries()) {
      const file = join(dir, `corrupt-${i}.json`);
      writeFileSync(file, text);
      chmodSync(file, mode ?? 0o600);
      // The follow verifier reads the file the same way; once is enough to show it refuses too.
      for (const follow of i === 0 ? [[], ['--follow', '--metrics-port', '0']] : [[]]) {
        const result = await verify('--mesh', mesh.meshId, '--checkpoint', file, ...follow);
        expect(result.code, `${text} ${follow.join(' ')}: ${result.stdout}${result.stderr}`).toBe(2);
        expect(result.stderr).toMatch(new RegExp(`workbench audit: checkpoint ${file} ${says.source}`));
        expect(readFileSync(file, 'utf8')).toBe(text);
      }
    }
    // Nothing was verified or remembered in the database either.
    const progress = await db.query('SELECT 1 FROM audit_verifier_progress WHERE mesh_id = $1', [
      mesh.meshId,
    ]);
    expect(progress.rowCount).toBe(0);
  }, 90_000);
});
