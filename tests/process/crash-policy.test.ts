/**
 * The crash policy of a real broker process (SECURITY.md § Crash policy): an unhandled rejection is
 * logged and counted while the node keeps serving; an uncaught exception drains the node and exits 1 for
 * its supervisor. The faults are planted by a preload module (on SIGUSR2), as a stray library callback would plant them.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ProcessNode, startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor, within } from '../helpers/wait.js';

let db: TestDatabase;
let dir: string;
const nodes: ProcessNode[] = [];

beforeAll(async () => {
  db = await createTestDatabase('crash_policy');
  dir = mkdtempSync(join(tmpdir(), 'crash-policy-'));
});
afterAll(async () => {
  for (const node of nodes) if (node.process.exitCode === null) node.process.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
  await db?.drop();
});

/** A healthy broker process with a module loaded first that runs `fault` on SIGUSR2 (sent once healthy). */
async function brokerWithFault(name: string, fault: string): Promise<ProcessNode> {
  const preload = join(dir, `${name}.mjs`);
  writeFileSync(preload, `process.on('SIGUSR2', () => { setImmediate(() => { ${fault} }); });\n`);
  const node = await startNode({
    kind: 'process',
    databaseUrl: db.url,
    env: {
      NODE_ID: `crash-${name}`,
      NODE_OPTIONS: `--import ${preload}`,
    },
  });
  nodes.push(node);
  node.process.kill('SIGUSR2');
  return node;
}

const metricValue = (text: string, kind: string) =>
  Number(text.match(new RegExp(`mesh_broker_unexpected_errors_total\\{kind="${kind}"[^}]*\\} (\\d+)`))?.[1]);

describe('crash policy of a broker process', () => {
  it('an unhandled rejection is logged and counted, and the node keeps serving', async () => {
    const node = await brokerWithFault('rejection', "Promise.reject(new Error('stray rejection'));");
    await waitFor(() => node.output().includes('unhandled promise rejection'), {
      timeoutMs: 10_000,
      what: 'the rejection logged',
    });
    const metrics = await (await fetch(`${node.url}/metrics`)).text();
    expect(metricValue(metrics, 'unhandled_rejection')).toBe(1);
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
    expect(node.process.exitCode).toBeNull();
    expect(node.output()).toContain('stray rejection');
  });

  it('an uncaught exception is logged as fatal, and the node drains and exits 1', async () => {
    const node = await brokerWithFault('exception', "throw new Error('stray exception');");
    const code = await within(node.exited, 15_000, 'still running');
    expect(code).toBe(1);
    const fatal = node
      .output()
      .split('\n')
      .filter((line) => line.includes('uncaught exception'))
      .map((line) => JSON.parse(line) as { level: number; err?: { message?: string } });
    expect(fatal[0]).toMatchObject({ level: 60, err: { message: 'stray exception' } });
    expect(node.output()).toContain('shutdown requested');
  });
});
