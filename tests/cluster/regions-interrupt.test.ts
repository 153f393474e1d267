/**
 * Ctrl-C to `workbench up --phase 4 --foreground`, once the two regions are up and in the middle of their
 * start (issue 20: the simulation cleans up everything it started on success, failure and Ctrl-C). Each run
 * gets a TMPDIR of its own, where the throw-away Postgres clusters are made (pg_ctl daemonizes them, so
 * they are no children of the command): whatever mentions that folder afterwards was left behind.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { ClusterFile } from '../../cli/cluster/local.js';
import { captured, WORKBENCH } from '../helpers/cli.js';
import { FAST_CLUSTER } from '../helpers/cluster.js';
import { descendants, listening, processesMentioning, stillRunning } from '../helpers/process.js';
import { waitFor } from '../helpers/wait.js';

interface Run {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | string | null>;
  /** The command's working folder (.workbench/ is made there). */
  cwd: string;
  /** Its TMPDIR. */
  tmp: string;
}

const runs: Run[] = [];

afterEach(() => {
  // A failed test leaves no simulation running: kill what is left, then remove the folders.
  for (const run of runs.splice(0)) {
    for (const { pid } of processesMentioning(run.tmp)) process.kill(pid, 'SIGKILL');
    if (run.child.pid) for (const pid of descendants(run.child.pid)) process.kill(pid, 'SIGKILL');
    run.child.kill('SIGKILL');
    rmSync(run.cwd, { recursive: true, force: true });
    rmSync(run.tmp, { recursive: true, force: true });
  }
});

function upInForeground(): Run {
  const cwd = mkdtempSync(join(tmpdir(), 'wb-regions-interrupt-'));
  const tmp = mkdtempSync(join(tmpdir(), 'wb-regions-tmp-'));
  chmodSync(tmp, 0o755); // the postgres user makes its clusters' folders in it
  const child = spawn(
    process.execPath,
    [WORKBENCH, 'up', '--phase', '4', '--foreground', '--port', '0', '--nodes-per-region', '1'],
    { cwd, env: { ...process.env, ...FAST_CLUSTER, TMPDIR: tmp }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const run = { child, cwd, tmp, ...captured(child) };
  runs.push(run);
  return run;
}

/** What was left of a run once its command exited: processes, folders, the state file, the control socket. */
async function leftBehind(run: Run, pids: number[]) {
  return {
    processes: await stillRunning(pids),
    mentioningItsTmp: (await waitFor(() => processesMentioning(run.tmp).length === 0, { timeoutMs: 5000 })
      .then(() => [])
      .catch(() => processesMentioning(run.tmp).map((p) => p.command))) as string[],
    inItsTmp: readdirSync(run.tmp),
    stateFile: existsSync(join(run.cwd, '.workbench', 'cluster.json')),
  };
}

const nothing = { processes: [], mentioningItsTmp: [], inItsTmp: [], stateFile: false };

describe('Ctrl-C to workbench up --phase 4 --foreground', { timeout: 240_000 }, () => {
  it('once both regions are up: every process, port and folder it started is gone, and it exits 0', async () => {
    const run = upInForeground();
    await waitFor(() => run.output().includes('Ctrl-C stops everything'), {
      timeoutMs: 180_000,
      what: `the simulation up\n${run.output()}`,
    });
    const cluster = JSON.parse(
      readFileSync(join(run.cwd, '.workbench', 'cluster.json'), 'utf8'),
    ) as ClusterFile;
    const regions = cluster.regions!;
    const ports = [
      cluster.lb.url,
      ...cluster.nodes.map((n) => n.url),
      ...regions.list.flatMap((r) => [r.lb.url, r.redis.url, r.postgres.url]),
    ].map((url) => Number(new URL(url).port));
    expect(await Promise.all(ports.map(listening))).toEqual(ports.map(() => true));
    const pids = descendants(run.child.pid!);
    expect(processesMentioning(run.tmp).length).toBeGreaterThanOrEqual(2); // both regions' postmasters

    run.child.kill('SIGINT');
    expect(await run.exited, run.output()).toBe(0);
    expect(await leftBehind(run, pids)).toEqual(nothing);
    expect(await Promise.all(ports.map(listening))).toEqual(ports.map(() => false));
    expect(existsSync(regions.supervisor.control)).toBe(false);
  });

  it('in the middle of its start (region A’s Postgres being made, nothing else yet): the same, and it exits non-zero', async () => {
    const run = upInForeground();
    await waitFor(() => processesMentioning(run.tmp).some((p) => p.command.includes('postgres')), {
      timeoutMs: 60_000,
      intervalMs: 10,
      what: `the first throw-away Postgres\n${run.output()}`,
    });
    expect(run.output()).not.toContain('Ctrl-C stops everything');
    const pids = descendants(run.child.pid!);
    run.child.kill('SIGINT');
    const exited = await run.exited;
    expect(exited, run.output()).not.toBe(0);
    expect(await leftBehind(run, pids), `exit ${exited}\n${run.output()}`).toEqual(nothing);
  });
});
