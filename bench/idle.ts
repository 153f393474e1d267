/**
 * e) Idle connections held by one node, and the node's memory (RSS) per connection: a fresh broker per run,
 * its RSS before and after TARGET welcomed sessions (spread over meshes of 40 sessions, so presence
 * events stay small), opened by WORKERS processes from different loopback source addresses. The target is
 * capped by this process's open-files limit (the node needs one descriptor per socket and cannot raise its
 * hard limit here); the result says what was reached and what stopped it.
 */
import { execSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startOurCluster } from './lib/cluster.js';
import { type Child, rssOf, startChild, waitUntil } from './lib/processes.js';
import { median, round } from './lib/stats.js';

const SESSIONS_PER_MESH = 40;
const WORKERS = 4;
/** Descriptors the node needs besides sockets: Postgres pool, Redis, logs, libuv. */
const NODE_FD_RESERVE = 100;

export interface IdleResult {
  requested: number;
  fdLimit: number;
  target: number;
  runs: Array<{
    connected: number;
    failed: number;
    rssBeforeMiB: number;
    rssAfterMiB: number;
    kibPerConnection: number;
    firstError: string;
  }>;
  medianConnected: number;
  medianRssAfterMiB: number;
  medianKibPerConnection: number;
  limitedBy: string;
}

export async function benchIdle(options: { runs: number; connections: number }): Promise<IdleResult> {
  const fdLimit = Number(execSync('ulimit -n', { shell: '/bin/bash' }).toString().trim()) || 1024;
  const target = Math.min(options.connections, fdLimit - NODE_FD_RESERVE);
  const cluster = await startOurCluster('idle', [], 0);
  const meshes = Math.ceil(target / SESSIONS_PER_MESH);
  const dir = mkdtempSync(join(tmpdir(), 'wb-bench-idle-'));
  const runs: IdleResult['runs'] = [];
  try {
    for (let run = 0; run < options.runs; run++) {
      const node = await cluster.start(`idle-${run + 1}`);
      const plans = await cluster.members(meshes, meshes);
      const plansFile = join(dir, `plans-${run}.json`);
      writeFileSync(plansFile, JSON.stringify(plans.map((p) => ({ meshId: p.meshId, keys: p.keys }))));
      await new Promise((resolve) => setTimeout(resolve, 500));
      const before = await rssOf(node.pid);
      const workers: Child[] = [];
      const per = Math.ceil(target / WORKERS);
      for (let w = 0; w < WORKERS; w++) {
        const count = Math.min(per, target - w * per);
        if (count <= 0) break;
        workers.push(
          startChild(process.execPath, [
            new URL('./idle-client.js', import.meta.url).pathname,
            node.wsUrl,
            String(count),
            `127.0.0.${10 + w}`,
            plansFile,
            String(SESSIONS_PER_MESH),
            String(w * per),
          ]),
        );
      }
      const outcomes: Array<{ connected: number; failed: number; firstError: string }> = [];
      for (const worker of workers) {
        await waitUntil('idle worker done', () => worker.output().includes('"connected"'), 180_000);
        outcomes.push(JSON.parse(worker.output().trim().split('\n').at(-1)!));
      }
      await new Promise((resolve) => setTimeout(resolve, 2000));
      const after = await rssOf(node.pid);
      const connected = outcomes.reduce((n, o) => n + o.connected, 0);
      runs.push({
        connected,
        failed: outcomes.reduce((n, o) => n + o.failed, 0),
        rssBeforeMiB: round(before / 2 ** 20),
        rssAfterMiB: round(after / 2 ** 20),
        kibPerConnection: round((after - before) / 1024 / Math.max(connected, 1)),
        firstError: outcomes.map((o) => o.firstError).find(Boolean) ?? '',
      });
      for (const worker of workers) await worker.kill();
      await node.kill();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const medianConnected = median(runs.map((r) => r.connected));
  return {
    requested: options.connections,
    fdLimit,
    target,
    runs,
    medianConnected,
    medianRssAfterMiB: round(median(runs.map((r) => r.rssAfterMiB))),
    medianKibPerConnection: round(median(runs.map((r) => r.kibPerConnection))),
    limitedBy:
      target < options.connections
        ? `open-files limit ${fdLimit} per process (hard limit; raising it is not permitted here)`
        : medianConnected < target
          ? `failures: ${runs[0]?.firstError}`
          : 'nothing: the requested count was reached',
  };
}
