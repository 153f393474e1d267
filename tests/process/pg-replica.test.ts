/**
 * A throw-away primary and a streaming replica of it through the latency proxy (20 ms one way), as the
 * two-region simulation runs them: replication pays the delay, the replica serves reads and refuses
 * writes, the lag readings follow a burst of writes and a cut link, promotion makes it writable, and
 * nothing is left behind: not by destroy(), not by a failed start, not by a SIGINT to the process that
 * started them (the compiled module, dist/: run "npm run build" first).
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import { PostgresPrimary, PostgresReplica } from '../../cli/cluster/pg-replica.js';
import { freePort } from '../../cli/ports.js';
import { LatencyProxy } from '../../cli/proxies/latency-proxy.js';
import { captured } from '../helpers/cli.js';
import { running } from '../helpers/process.js';
import { waitFor } from '../helpers/wait.js';

const ONE_WAY_MS = 20;

let primary: PostgresPrimary;
let proxy: LatencyProxy;
let replica: PostgresReplica;

beforeAll(async () => {
  primary = await PostgresPrimary.start();
  proxy = await LatencyProxy.start({ upstream: { port: primary.port }, delayMs: ONE_WAY_MS, jitterMs: 2 });
  replica = await PostgresReplica.start(primary, { via: { port: proxy.port } });
  await primary.query('CREATE TABLE notes (id serial PRIMARY KEY, body text NOT NULL)');
  await replica.caughtUp();
});

afterAll(async () => {
  replica?.destroy();
  primary?.destroy();
  await proxy?.close();
});

/** The postmaster's pid, from the first line of postmaster.pid. */
function postmasterPid(dataDir: string): number {
  return Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
}

describe('a streaming replica through the latency proxy', () => {
  it('streams through the proxy: the primary sees one streaming replica from it', async () => {
    const { rows } = await primary.query<{ state: string; application_name: string; slot_name: string }>(
      `SELECT r.state, r.application_name, s.slot_name
         FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid`,
    );
    expect(rows).toEqual([{ state: 'streaming', application_name: replica.slot, slot_name: replica.slot }]);
    expect(await replica.inRecovery()).toBe(true);
    // The WAL stream crosses the proxy (it is the only way the replica knows to the primary).
    expect(proxy.stats().open).toBeGreaterThanOrEqual(1);
    expect(proxy.stats().bytesToClient).toBeGreaterThan(0);
  });

  it('a write on the primary is seen on the replica after at least the one-way delay, within a bound', async () => {
    const started = performance.now();
    const { rows } = await primary.query<{ id: number }>(
      "INSERT INTO notes (body) VALUES ('from region A') RETURNING id",
    );
    const id = rows[0]!.id;
    await waitFor(
      async () =>
        (await replica.query('SELECT body FROM notes WHERE id = $1', [id])).rows[0]?.body === 'from region A',
      { timeoutMs: 5000, intervalMs: 5, what: 'the row on the replica' },
    );
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(ONE_WAY_MS);
    expect(elapsed).toBeLessThan(2000);
  });

  it('refuses writes: a read-only transaction error', async () => {
    await expect(replica.query("INSERT INTO notes (body) VALUES ('from region B')")).rejects.toMatchObject({
      code: '25006', // read_only_sql_transaction
      message: 'cannot execute INSERT in a read-only transaction',
    });
    // Reads are served.
    expect((await replica.query('SELECT count(*)::int AS n FROM notes')).rows[0]!.n).toBeGreaterThanOrEqual(
      1,
    );
  });

  it('reads sensible lag numbers: zero when caught up, growing under a burst and a cut, zero again after', async () => {
    await replica.caughtUp();
    const idle = await replica.lag();
    expect(idle).toMatchObject({ bytes: 0, ms: 0 });
    expect(idle.replayedLsn).toBe(idle.primaryLsn);

    // A burst of writes (one transaction every few ms) while reading the lag: the 20 ms link shows.
    const readings: Array<Awaited<ReturnType<PostgresReplica['lag']>>> = [];
    let writing = true;
    const burst = (async () => {
      for (let i = 0; i < 60; i++)
        await primary.query("INSERT INTO notes (body) SELECT repeat('x', 200) FROM generate_series(1, 200)");
      writing = false;
    })();
    while (writing) readings.push(await replica.lag());
    await burst;
    expect(readings.length).toBeGreaterThan(0);
    for (const reading of readings) {
      expect(reading.bytes).toBeGreaterThanOrEqual(0);
      expect(reading.ms).not.toBeNull();
      expect(reading.ms!).toBeGreaterThanOrEqual(0);
      expect(reading.ms!).toBeLessThan(5000);
    }
    expect(Math.max(...readings.map((r) => r.bytes))).toBeGreaterThan(0);

    // The link cut: the replica falls behind by at least what was written, and the age of its last
    // replayed transaction grows; once restored it catches up.
    await replica.caughtUp();
    proxy.cut();
    try {
      const before = await primary.currentLsn();
      await primary.query("INSERT INTO notes (body) SELECT repeat('y', 500) FROM generate_series(1, 3000)");
      const after = await primary.currentLsn();
      // The age of the last replayed transaction grows while the link is cut: it passes 300 ms.
      const cut = await waitFor(
        async () => {
          const lag = await replica.lag();
          return lag.ms !== null && lag.ms >= 300 ? lag : undefined;
        },
        { timeoutMs: 10_000, what: 'the replica 300 ms behind' },
      );
      const { rows } = await primary.query<{ b: string }>('SELECT pg_wal_lsn_diff($1, $2)::text AS b', [
        after,
        before,
      ]);
      const written = Number(rows[0]!.b);
      expect(written).toBeGreaterThan(1_000_000);
      expect(cut.bytes).toBeGreaterThanOrEqual(written);
      expect(cut.ms!).toBeGreaterThanOrEqual(300);
    } finally {
      proxy.restore();
    }
    await replica.caughtUp(20_000);
    expect(await replica.lag()).toMatchObject({ bytes: 0, ms: 0 });
  });
});

describe('promotion and cleanup', () => {
  it('promotion makes the replica writable, with the primary’s data', async () => {
    const promotedPrimary = await PostgresPrimary.start();
    const promoted = await PostgresReplica.start(promotedPrimary, { via: { port: promotedPrimary.port } });
    try {
      await promotedPrimary.query('CREATE TABLE t (v text)');
      await promotedPrimary.query("INSERT INTO t VALUES ('before')");
      await promoted.caughtUp();
      await expect(promoted.query("INSERT INTO t VALUES ('refused')")).rejects.toMatchObject({
        code: '25006',
      });
      await promoted.promote();
      expect(await promoted.inRecovery()).toBe(false);
      await promoted.query("INSERT INTO t VALUES ('after')");
      expect((await promoted.query('SELECT v FROM t ORDER BY v')).rows).toEqual([
        { v: 'after' },
        { v: 'before' },
      ]);
      await expect(promoted.lag()).rejects.toThrow(/is not a standby/);
    } finally {
      promoted.destroy();
      promotedPrimary.destroy();
    }
  });

  it('destroy() leaves no process and no data folder', async () => {
    const p = await PostgresPrimary.start();
    const r = await PostgresReplica.start(p);
    const servers = [p, r].map((s) => ({ dir: s.dataDir, pid: postmasterPid(s.dataDir) }));
    for (const server of servers) expect(running(server.pid)).toBe(true);
    r.destroy();
    p.destroy();
    r.destroy(); // idempotent
    for (const server of servers) {
      expect(existsSync(server.dir)).toBe(false);
      await waitFor(() => !running(server.pid), { what: `postmaster ${server.pid} gone` });
    }
  });

  it('a replica whose primary cannot be reached fails with pg_basebackup’s reason and leaves no folder', async () => {
    const ownDirs = () => new Set(readdirSync(tmpdir()).filter((name) => name.startsWith('wb-pg-')));
    const before = ownDirs();
    const closed = await freePort();
    await expect(PostgresReplica.start(primary, { via: { port: closed } })).rejects.toThrow(
      /pg_basebackup failed: .*(Connection refused|could not connect)/s,
    );
    // Other runs may make clusters meanwhile: only a new folder without a running server would be ours.
    const leftovers = [...ownDirs()].filter(
      (name) => !before.has(name) && !existsSync(join(tmpdir(), name, 'data', 'postmaster.pid')),
    );
    expect(leftovers.filter((name) => existsSync(join(tmpdir(), name, 'data', 'backup_label')))).toEqual([]);
    await expect(PostgresReplica.start(primary, { via: { port: 0 } })).rejects.toThrow(
      /via port must be an integer from 1 to 65535, not 0/,
    );
  });

  it('SIGINT to the process that started them stops and removes both', async () => {
    const module = join(packageRoot(), 'dist', 'cli', 'cluster', 'pg-replica.js');
    if (!existsSync(module)) throw new Error(`${module} is missing: run "npm run build" first`);
    const script = `
      const { PostgresPrimary, PostgresReplica } = await import(${JSON.stringify(module)});
      const primary = await PostgresPrimary.start();
      const replica = await PostgresReplica.start(primary);
      console.log(JSON.stringify([primary.dataDir, replica.dataDir]));
      setInterval(() => {}, 1000); // runs until interrupted
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const { output, exited } = captured(child);
    try {
      const line = await waitFor(
        () =>
          output()
            .split('\n')
            .find((l) => l.startsWith('[')),
        {
          timeoutMs: 30_000,
          what: 'the child to print its data folders',
        },
      );
      const dirs = JSON.parse(line) as string[];
      const pids = dirs.map(postmasterPid);
      for (const pid of pids) expect(running(pid)).toBe(true);
      child.kill('SIGINT');
      expect(await exited).toBe('SIGINT'); // it still dies by the signal, as without the cleanup
      for (const dir of dirs) expect(existsSync(dir)).toBe(false);
      for (const pid of pids) await waitFor(() => !running(pid), { what: `postmaster ${pid} gone` });
    } finally {
      child.kill('SIGKILL');
    }
  }, 60_000);
});
