/**
 * The SDK's examples (examples/), run as a user would: the Node peer as a child process (plain Node,
 * loading @mesh-broker/sdk's dist/ build through the workspace link) and the browser peer served by its
 * serve.js and opened in headless Chromium (the package's browser build, no Node import in it). The two
 * talk to each other through a real broker: each sends the other a direct message and shows the one it got.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import type { TestNode } from '../helpers/broker.js';
import { captured } from '../helpers/cli.js';
import { createMesh, type TestMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { type Finished, runToEnd } from '../helpers/process.js';
import { waitFor } from '../helpers/wait.js';

const EXAMPLES = join(packageRoot(), 'examples');

let db: TestDatabase;
let node: TestNode;
let mesh: TestMesh;
let server: ChildProcess | undefined;
let browser: Browser | undefined;

/** `node examples/node-peer/peer.js ARGS` to its end. */
function runNodePeer(args: string[]): Promise<Finished> {
  return runToEnd(process.execPath, [join(EXAMPLES, 'node-peer', 'peer.js'), ...args], {
    cwd: join(EXAMPLES, 'node-peer'),
  });
}

/** Starts examples/browser-peer/serve.js on a free port; resolves with the URL it prints. */
async function serveBrowserPeer(): Promise<string> {
  server = spawn(process.execPath, [join(EXAMPLES, 'browser-peer', 'serve.js'), '--port', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const { output, exited } = captured(server);
  let code: number | string | null | undefined;
  void exited.then((value) => {
    code = value;
  });
  return waitFor(
    () => {
      if (code !== undefined) throw new Error(`serve.js exited (${code}):\n${output()}`);
      return output().match(/browser peer: (http:\/\/127\.0\.0\.1:\d+\/)/)?.[1];
    },
    { what: 'serve.js to print its URL' },
  );
}

const lines = (stdout: string) =>
  stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, unknown>);

beforeAll(async () => {
  db = await createTestDatabase('examples');
  node = await startNode({ kind: 'in-process', databaseUrl: db.url, env: { NODE_ID: 'examples' } });
  mesh = await createMesh(node, 2);
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
});
afterAll(async () => {
  await browser?.close();
  server?.kill();
  await node?.stop();
  await db?.drop();
});

describe('the examples', () => {
  it('the Node peer refuses a call without its options, naming them (exit 2)', async () => {
    const run = await runNodePeer(['--mesh', mesh.meshId]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('missing --url, --pubkey, --secret-key, --to');
    expect(run.stderr).toContain('usage: node peer.js');
  });

  it('a Node peer and a browser peer exchange direct messages through a broker', async () => {
    const [nodeMember, browserMember] = mesh.members as [TestMesh['members'][0], TestMesh['members'][0]];
    const pageUrl = new URL(await serveBrowserPeer());
    const query = {
      url: node.wsUrl,
      meshId: mesh.meshId,
      pubkey: browserMember.pubkey,
      secretKey: browserMember.secretKey,
      to: nodeMember.pubkey,
      message: 'hello from the browser',
    };
    for (const [name, value] of Object.entries(query)) pageUrl.searchParams.set(name, value);

    const page: Page = await browser!.newPage();
    const pageErrors: string[] = [];
    const requested: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));
    page.on('request', (request) => requested.push(new URL(request.url()).pathname));

    // Both at once: whichever connects second finds the other's message owed to it (replayed at its
    // hello) or gets it live; each prints or lists it once either way.
    const nodePeer = runNodePeer([
      ...['--url', node.wsUrl, '--mesh', mesh.meshId],
      ...['--pubkey', nodeMember.pubkey, '--secret-key', nodeMember.secretKey],
      ...['--to', browserMember.pubkey, '--message', 'hello from node', '--wait-ms', '20000'],
    ]);
    await page.goto(pageUrl.href);
    await page.getByTestId('status').filter({ hasText: 'connected' }).waitFor({ timeout: 15_000 });
    const received = page.locator('[data-testid="messages"] li');
    await received.first().waitFor({ timeout: 15_000 });
    expect(await received.count()).toBe(1);
    expect(await received.first().getAttribute('data-body')).toBe('hello from node');
    expect(await received.first().getAttribute('data-from')).toBe(nodeMember.pubkey);

    const run = await nodePeer;
    expect(run.code, run.stderr).toBe(0);
    const events = lines(run.stdout);
    // A message owed at the hello can reach the listener before connect()'s continuation prints
    // `connected`: the two lines come in either order, each once.
    expect(events.filter((event) => event.event === 'connected')).toEqual([
      expect.objectContaining({ node: 'examples' }),
    ]);
    expect(events.filter((event) => event.event === 'sent')).toHaveLength(1);
    const messages = events.filter((event) => event.event === 'message');
    expect(messages).toEqual([
      expect.objectContaining({ from: browserMember.pubkey, body: 'hello from the browser' }),
    ]);
    // The id the browser's `send` resolved with (the broker's `sent`) is the one the Node peer got.
    await page.getByTestId('sent').filter({ hasNotText: '–' }).waitFor();
    expect(await page.getByTestId('sent').textContent()).toBe(messages[0]!.messageId);

    // The page loaded the package's browser build and nothing else of the SDK: one module, no import map
    // for `ws` or `node:crypto`, no shims.
    expect(requested.filter((path) => path !== '/favicon.ico').sort()).toEqual([
      '/',
      '/peer.js',
      '/sdk/mesh-sdk.js',
    ]);
    expect(pageErrors).toEqual([]);
    await page.close();
  });
});
