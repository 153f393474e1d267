import type { MeshClient } from '@mesh-broker/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, adminOf } from '../helpers/broker.js';
import { type NodeProcess, runWorkbench } from '../helpers/cli.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { pause } from '../helpers/wait.js';

let db: TestDatabase;
let node: NodeProcess;

beforeAll(async () => {
  db = await createTestDatabase('fuzz');
  node = await startNode({ kind: 'process', databaseUrl: db.url });
}, 60_000);
afterAll(async () => {
  closeAllClients();
  node?.process.kill('SIGKILL');
  await node?.exited;
  await db?.drop();
});

async function rssBytes(): Promise<number> {
  const text = await (await fetch(`${node.url}/metrics`)).text();
  return Number(/^mesh_broker_process_process_resident_memory_bytes\{[^}]*\} (\S+)$/m.exec(text)?.[1]);
}

describe('protocol fuzzing', () => {
  it('thousands of bad frames and requests: each answered with an error or a close, the node unharmed, good peers served throughout', async () => {
    // Well-behaved peers exchanging numbered DMs the whole time.
    const mesh = await createMesh(adminOf(node.url), 2);
    const sender: MeshClient = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const receiver: MeshClient = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const received: number[] = [];
    receiver.on('message', (m) => received.push(Number(m.body)));
    let sent = 0;
    let fuzzing = true;
    const traffic = (async () => {
      // Within the send quota (10 burst, 60 a minute): one every 1.2 s.
      while (fuzzing && sent < 100) {
        await sender.send(mesh.members[1]!.pubkey, String(sent++));
        await pause(
          1200,
          'a pace within the send quota (10 burst, 60 a minute): the fuzz runs beside live traffic',
        );
      }
    })();
    const rss = [await rssBytes()];
    const sampler = setInterval(() => void rssBytes().then((bytes) => rss.push(bytes)), 500);

    const fuzz = await runWorkbench([
      'fuzz',
      '--url',
      node.url,
      '--admin-token',
      ADMIN_TOKEN,
      '--seed',
      '20261129',
      '--frames',
      '4000',
      '--requests',
      '300',
      '--abuse',
      'none',
      '--json',
    ]);
    fuzzing = false;
    clearInterval(sampler);
    await traffic;
    expect(fuzz.code, fuzz.stdout + fuzz.stderr).toBe(0);
    const report = JSON.parse(fuzz.stdout);
    expect(report.findings).toEqual([]);
    expect(report.frames.sent).toBe(4000);
    expect(report.frames.errors + report.frames.closes).toBe(4000);
    expect(report.frames.closes).toBeGreaterThan(0); // the oversized ones (1009)
    expect(report.requests.sent).toBe(300);

    // The node: alive, no unhandled rejection or uncaught exception, memory bounded.
    expect(node.process.exitCode).toBeNull();
    expect(node.output()).not.toMatch(/unhandled|uncaught/i);
    expect(Math.max(...rss) - rss[0]!).toBeLessThan(150 * 1024 * 1024);
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
    // The good peers were served throughout, in order.
    await expect.poll(() => received.length, { timeout: 5000 }).toBe(sent);
    expect(received).toEqual([...received].sort((a, b) => a - b));
    expect(sent).toBeGreaterThan(2);
  }, 120_000);

  it('resource abuse (MCP amplification, slow readers, a frame flood): the node grows by at most 100 MiB each time, good peers served throughout', async () => {
    const fuzz = await runWorkbench([
      'fuzz',
      '--url',
      node.url,
      '--admin-token',
      ADMIN_TOKEN,
      '--frames',
      '1',
      '--requests',
      '1',
      '--abuse-seconds',
      '5',
      '--rss-bound-mib',
      '100',
      '--json',
    ]);
    expect(fuzz.code, fuzz.stdout + fuzz.stderr).toBe(0);
    const report = JSON.parse(fuzz.stdout) as {
      findings: unknown[];
      abuse: Array<{
        case: string;
        rssPeakGrowthBytes: number;
        goodDms: number;
        attack: Record<string, number>;
      }>;
    };
    expect(report.findings).toEqual([]);
    const byCase = Object.fromEntries(report.abuse.map((result) => [result.case, result]));
    expect(Object.keys(byCase).sort()).toEqual(['amplification', 'flood', 'slow-reader']);
    for (const result of report.abuse) {
      expect(result.rssPeakGrowthBytes).toBeLessThan(100 * 1024 * 1024);
      // Served throughout: every good DM of the case delivered within 5 s (else a finding, above).
      expect(result.goodDms).toBeGreaterThanOrEqual(1);
    }
    // Each attack really ran: servers registered up to a cap (not all 300), requests and frames written.
    expect(byCase.amplification!.attack.servers).toBeGreaterThan(0);
    expect(byCase.amplification!.attack.servers).toBeLessThan(300);
    expect(byCase.amplification!.attack.requests).toBeGreaterThan(100);
    expect(byCase['slow-reader']!.attack.published).toBeGreaterThan(100);
    expect(byCase.flood!.attack.frames).toBeGreaterThan(100);
    expect(node.process.exitCode).toBeNull();
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
  }, 120_000);
});
