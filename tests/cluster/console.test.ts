/**
 * The console page and the browser peer, in headless Chromium (Debian's, /usr/bin/chromium, driven by
 * playwright-core) against a real phase-3 local cluster (`workbench up`, HAProxy in front).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateMemberKeys } from '@mesh-broker/sdk';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import type { ClusterFile } from '../../cli/cluster/local.js';
import { runWorkbench, WORKBENCH } from '../helpers/cli.js';
import { FAST_CLUSTER } from '../helpers/cluster.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

/** Screenshots, for people to look at (git-ignored). */
const ARTIFACTS = join(packageRoot(), 'test-results', 'console');

let db: TestDatabase;
let cwd: string;
let cluster: ClusterFile;
let consoleProcess: ChildProcess | undefined;
let consoleUrl: string;
/** The console's key, from the URL it printed. */
let consoleKey: string;
let browser: Browser;
let page: Page;
const pageErrors: string[] = [];

/**
 * `workbench console --port 0` in the cluster's folder; resolves with the URL it prints. Its output is a
 * pipe, not a terminal, so it prints no key: that is in .workbench/console.url.
 */
function startConsole(): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WORKBENCH, 'console', '--port', '0'], {
      cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    consoleProcess = child;
    let output = '';
    const onData = (chunk: Buffer) => {
      output += chunk;
      const url = output.match(/console: (http:\/\/127\.0\.0\.1:\d+)\//);
      if (url) {
        const withKey = readFileSync(join(cwd, '.workbench', 'console.url'), 'utf8');
        consoleKey = withKey.match(/\?key=([\w-]+)/)![1]!;
        resolve(url[1]!);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.on('exit', (code) => reject(new Error(`workbench console exited (${code}):\n${output}`)));
  });
}

beforeAll(async () => {
  db = await createTestDatabase('console');
  cwd = mkdtempSync(join(tmpdir(), 'wb-console-'));
  // A larger send burst: the browser-peer test sends a few messages in a row from one member.
  const up = await runWorkbench(
    ['up', '--phase', '3', '--port', '0', '--database-url', db.url],
    { ...FAST_CLUSTER, SEND_BURST: '100' },
    cwd,
  );
  expect(up.code, up.stderr).toBe(0);
  cluster = JSON.parse(readFileSync(join(cwd, '.workbench', 'cluster.json'), 'utf8')) as ClusterFile;
  consoleUrl = await startConsole();
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  // A context of its own, so a second page (the decoy of another origin) shares the operator's cookies.
  page = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
  page.on('pageerror', (error) => pageErrors.push(error.message));
}, 90_000);

afterAll(async () => {
  closeAllClients();
  await browser?.close();
  if (consoleProcess && consoleProcess.exitCode === null) {
    const exited = new Promise((resolve) => consoleProcess!.once('exit', resolve));
    consoleProcess.kill('SIGTERM');
    await exited;
  }
  if (cwd) {
    await runWorkbench(['down'], {}, cwd);
    rmSync(cwd, { recursive: true, force: true });
  }
  await db?.drop();
}, 60_000);

/** An admin call through the load balancer (mesh and member set-up). */
async function adminCall(path: string, body: unknown): Promise<Record<string, string>> {
  const response = await fetch(`${cluster.lb.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${cluster.adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(response.ok, `${path}: ${response.status}`).toBe(true);
  return (await response.json()) as Record<string, string>;
}

/** A mesh with two members, for traffic. */
async function meshWithTwoMembers(name: string) {
  const { meshId } = await adminCall('/admin/meshes', { name: `${name}-${Date.now()}` });
  const members = [generateMemberKeys(), generateMemberKeys()] as const;
  for (const member of members) await adminCall(`/admin/meshes/${meshId}/members`, { pubkey: member.pubkey });
  return { meshId: meshId!, members };
}

const nodeRow = (id: string, health: 'up' | 'down') =>
  `[data-testid="nodes"] tr[data-node="${id}"][data-health="${health}"]`;

async function actingOnEveryNode(flag: string, value: boolean): Promise<boolean> {
  const reports = await Promise.all(
    cluster.nodes.map(async (node) => {
      const report = (await (await fetch(`${node.url}/flags`)).json()) as {
        flags: Record<string, { acting: boolean }>;
      };
      return report.flags[flag]?.acting;
    }),
  );
  return reports.every((acting) => acting === value);
}

describe('workbench console (headless Chromium)', () => {
  it('shows the phase, every node up with its background work, the flags per node, ownership and chains', async () => {
    await page.goto(`${consoleUrl}/?key=${consoleKey}`);
    for (const node of cluster.nodes) await page.waitForSelector(nodeRow(node.id, 'up'), { timeout: 10_000 });
    expect(await page.textContent('[data-testid="phase"]')).toBe('3');
    const rows = await page.$$eval('[data-testid="nodes"] tr', (trs) =>
      trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)),
    );
    expect(rows.map((r) => r[0])).toEqual(cluster.nodes.map((n) => n.id));
    for (const row of rows) expect(row[2]).toMatch(/^(active|standby)$/);
    // Every phase-3 flag is on in the file and acted on by every node: no row disagrees.
    await page.waitForSelector('[data-testid="flags"] tr[data-flag="ha.clock"]');
    expect(await page.$$('[data-testid="flags"] tr.disagree')).toHaveLength(0);
    expect(await page.textContent('[data-testid="chains"]')).toMatch(/^\d+ intact, 0 broken$/);
    expect(await page.textContent('[data-testid="ownership"]')).toContain('clock leaders');
    expect(pageErrors).toEqual([]);
  });

  it('a killed node shows as down within 5 s, and up again after it is started', async () => {
    const killedAt = Date.now(); // before the command: its own start-up counts against the console
    const kill = await runWorkbench(['node', 'kill', 'broker-2'], {}, cwd);
    expect(kill.code, kill.stderr).toBe(0);
    await page.waitForSelector(nodeRow('broker-2', 'down'), { timeout: 10_000 });
    const shownDownMs = Date.now() - killedAt;
    console.log(`console: broker-2 shown down ${shownDownMs} ms after the kill`);
    expect(shownDownMs).toBeLessThanOrEqual(5000);
    for (const id of ['broker-1', 'broker-3']) expect(await page.$(nodeRow(id, 'up'))).not.toBeNull();

    const start = await runWorkbench(['node', 'start', 'broker-2'], FAST_CLUSTER, cwd);
    expect(start.code, start.stderr).toBe(0);
    await page.waitForSelector(nodeRow('broker-2', 'up'), { timeout: 10_000 });
  }, 60_000);

  it('flipping a flag from the page converges on every node, is shown and audited; a bad flip changes nothing', async () => {
    const flag = 'ha.watches';
    const flagsFile = join(cluster.flagsDir, `${cluster.flagsEnv}.json`);
    await page.waitForSelector(`[data-testid="flags"] tr[data-flag="${flag}"][data-desired="true"]`);
    const clickedAt = Date.now();
    await page.click(`[data-testid="flip-${flag}"]`);
    await waitFor(() => actingOnEveryNode(flag, false), {
      timeoutMs: 10_000,
      what: `${flag} off everywhere`,
    });
    const convergedMs = Date.now() - clickedAt;
    console.log(`console: ${flag} off on every node ${convergedMs} ms after the click`);
    // The page shows it: the file's value and every node's cell, and no disagreement once converged.
    await waitFor(
      async () => {
        const row = `[data-testid="flags"] tr[data-flag="${flag}"]`;
        const cells = await page.$$eval(`${row} td[data-node]`, (tds) => tds.map((td) => td.textContent));
        const desired = await page.getAttribute(row, 'data-desired');
        return desired === 'false' && cells.length === 3 && cells.every((c) => c === 'off');
      },
      { timeoutMs: 10_000, what: `the page showing ${flag} off on every node` },
    );
    expect(await page.textContent('[data-testid="flip-result"]')).toMatch(
      /^ha\.watches: on → off; .*; pushed to 3 node\(s\)$/,
    );
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'console.png'), fullPage: true });

    // Refused requests: nothing written.
    const before = readFileSync(flagsFile, 'utf8');
    const token = cluster.adminToken;
    const post = (body: string, auth = `Bearer ${token}`) =>
      fetch(`${consoleUrl}/api/flags`, {
        method: 'POST',
        headers: { authorization: auth, 'content-type': 'application/json' },
        body,
      });
    const unknown = await post('{"flag":"ha.watchez","value":true}');
    expect(unknown.status).toBe(400);
    expect(((await unknown.json()) as { message: string }).message).toContain('unknown flag "ha.watchez"');
    const badValue = await post('{"flag":"ha.watches","value":"on"}');
    expect(badValue.status).toBe(400);
    expect(((await badValue.json()) as { message: string }).message).toContain('must be true or false');
    expect((await post('{"flag":"ha.watches","value":true}', 'Bearer wrong')).status).toBe(401);
    expect(readFileSync(flagsFile, 'utf8')).toBe(before);

    // And back on, from the page again.
    await page.click(`[data-testid="flip-${flag}"]`);
    await waitFor(() => actingOnEveryNode(flag, true), { timeoutMs: 10_000, what: `${flag} on everywhere` });
    // Both flips audited by the console: the first one too, though a fresh cluster has no recorded flag
    // values yet (the change is from the file's value, not from the registry's default).
    await waitFor(
      async () => (await page.textContent('[data-testid="flip-result"]'))?.startsWith('ha.watches: off → on'),
      { what: 'the second flip shown' },
    );
    expect(await page.textContent('[data-testid="flip-result"]')).toContain('; audited;');
    const audited = await db.query<{ actor: string; payload: { flag: string; to: boolean } }>(
      "SELECT actor, payload FROM audit_log WHERE event_type = 'flag.changed' ORDER BY id DESC LIMIT 1",
    );
    expect(audited.rows[0]?.actor).toMatch(/^console:/);
    expect(audited.rows[0]?.payload).toMatchObject({ flag, to: true });
    const flips = await db.query<{ payload: { from: boolean; to: boolean } }>(
      "SELECT payload FROM audit_log WHERE event_type = 'flag.changed' AND actor LIKE 'console:%' ORDER BY id",
    );
    expect(flips.rows.map((r) => [r.payload.from, r.payload.to])).toEqual([
      [true, false],
      [false, true],
    ]);
    expect(pageErrors).toEqual([]);
  }, 60_000);
});

interface TimelineRowOnPage {
  id: string;
  kind: string;
  cells: string[];
  trouble: boolean;
}

describe('the rate plots and the timeline of flag changes and promotions', () => {
  it('traffic across nodes shows in the three plots; a CLI flip, a promotion and a smoke run on the timeline, newest first', async () => {
    // Traffic: a receiver on broker-1, a sender on broker-2, so every message is accepted on one node and
    // delivered over the bus by another (the fan-out latency is measured there).
    const { meshId, members } = await meshWithTwoMembers('console-rates');
    const [receiverKeys, senderKeys] = members;
    const ws = (id: string) => `${cluster.nodes.find((n) => n.id === id)!.url.replace(/^http/, 'ws')}/ws`;
    const mesh = { meshId, members: [...members] };
    const receiver = await connectPeer(ws('broker-1'), mesh, receiverKeys);
    const sender = await connectPeer(ws('broker-2'), mesh, senderKeys);
    let received = 0;
    receiver.on('message', () => {
      received += 1;
    });
    const SENT = 40;
    // One after the other, each once `sent`: the plotted rates integrated over their samples must give
    // the count back however the messages fall into the samples, so no pace is needed.
    for (let i = 1; i <= SENT; i++) await sender.send(receiverKeys.pubkey, `rate ${i}`);
    await waitFor(() => received >= SENT, { timeoutMs: 10_000, what: `all ${SENT} messages received` });

    const plot = async (name: string) => {
      const figure = `[data-testid="plot-${name}"]`;
      return {
        points: Number(await page.getAttribute(figure, 'data-points')),
        nonZero: Number(await page.getAttribute(figure, 'data-nonzero')),
      };
    };
    await waitFor(
      async () => {
        const [accepted, delivered, fanout] = await Promise.all(
          ['accepted', 'delivered', 'fanout'].map(plot),
        );
        return accepted!.nonZero > 0 && delivered!.nonZero > 0 && fanout!.points > 0;
      },
      { timeoutMs: 10_000, what: 'points in the three plots' },
    );
    // What the plots draw adds up: the rates integrated over their samples give back the messages sent
    // (the first sample after the traffic may still be due: a few messages of slack).
    type History = { at: number[]; accepted: (number | null)[]; delivered: (number | null)[] };
    const history = await waitFor(
      async () => {
        const state = await page.evaluate(async () => (await fetch('/api/state')).json());
        const h = (state as { history: History }).history;
        const integral = (values: (number | null)[]) =>
          values.reduce<number>(
            (total, value, i) =>
              i === 0 || value === null ? total : total + (value * (h.at[i]! - h.at[i - 1]!)) / 1000,
            0,
          );
        const totals = { accepted: integral(h.accepted), delivered: integral(h.delivered) };
        return totals.accepted >= SENT - 3 && totals.delivered >= SENT - 3 ? totals : undefined;
      },
      { timeoutMs: 10_000, what: 'the plotted rates adding up to the messages sent' },
    );
    console.log(`console plots: ${JSON.stringify(history)} integrated over the window (${SENT} sent)`);
    expect(history.accepted).toBeLessThanOrEqual(SENT + 3);
    expect(history.delivered).toBeLessThanOrEqual(SENT + 3);
    expect(await page.textContent('[data-testid="plot-fanout"]')).toContain('fan-out latency');
    expect(await page.textContent('[data-testid="plot-accepted"]')).toContain('−5 min');

    // A flip with the CLI, a promotion (to the phase the cluster is at: blocked, recorded like any other),
    // and a smoke run. `workbench promote` records a real smoke run only after minutes of checks, so this
    // one is a row written as it writes them (a failed run of two checks): it tests the reading of
    // smoke_runs, not the smoke suite.
    const operator = { WORKBENCH_ACTOR: 'timeline-operator' };
    const flip = await runWorkbench(
      ['flags', 'set', 'ha.watches', 'off', '--env', cluster.flagsEnv],
      operator,
      cwd,
    );
    expect(flip.code, flip.stderr).toBe(0);
    const promotion = await runWorkbench(['promote', '--env', cluster.flagsEnv, '--to', '3'], operator, cwd);
    // Blocked before any change: exit 3 (docs/promotion.md § Exit codes).
    expect(promotion.code, promotion.stdout + promotion.stderr).toBe(3);
    expect(promotion.stdout).toContain('blocked, nothing changed: already at phase 3');
    await db.query('INSERT INTO smoke_runs (environment, phase, passed, results) VALUES ($1, $2, $3, $4)', [
      cluster.flagsEnv,
      3,
      false,
      JSON.stringify([
        { name: 'presence-across-nodes', met: true },
        { name: 'cross-node-dm', met: false },
      ]),
    ]);

    const timelineRows = () =>
      page.$$eval('[data-testid="timeline"] tr', (trs) =>
        trs.map((tr) => ({
          id: tr.getAttribute('data-id') ?? '',
          kind: tr.getAttribute('data-kind') ?? '',
          cells: [...tr.querySelectorAll('td')].map((td) => td.textContent ?? ''),
          trouble: tr.classList.contains('trouble'),
        })),
      );
    const rows: TimelineRowOnPage[] = await waitFor(
      async () => {
        const shown = await timelineRows();
        return shown[0]?.kind === 'smoke' ? shown : undefined;
      },
      { timeoutMs: 10_000, what: 'the smoke run at the top of the timeline' },
    );
    const [smoke, blocked, cliFlip, ...older] = rows;
    expect(smoke).toMatchObject({
      cells: [
        expect.any(String),
        'phase 3 smoke checks',
        '–',
        'failed: 1/2 checks met, first: cross-node-dm',
      ],
      trouble: true,
    });
    expect(blocked).toMatchObject({
      kind: 'promotion',
      cells: [
        expect.any(String),
        'promotion phase 3 → 3',
        'timeline-operator',
        'blocked: already at phase 3',
      ],
      trouble: true,
    });
    expect(cliFlip).toMatchObject({
      kind: 'flag',
      cells: [expect.any(String), 'ha.watches on → off', 'timeline-operator', 'changed, audited'],
      trouble: false,
    });
    // Before them, the two flips made from the page (the flip test): newest first.
    expect(older.slice(0, 2).map((row) => [row.cells[1], row.cells[2]?.startsWith('console:')])).toEqual([
      ['ha.watches off → on', true],
      ['ha.watches on → off', true],
    ]);
    // Each entry is the record's own time, shown in the browser's local time.
    const recorded = await db.query<{ created_at: Date }>(
      "SELECT created_at FROM audit_log WHERE event_type = 'promotion.blocked' ORDER BY id DESC LIMIT 1",
    );
    const shownAt = await page.getAttribute(
      `[data-testid="timeline"] tr[data-id="${blocked!.id}"] td`,
      'title',
    );
    expect(shownAt).toBe(recorded.rows[0]!.created_at.toISOString());

    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'console-plots-timeline.png'), fullPage: true });
    const back = await runWorkbench(
      ['flags', 'set', 'ha.watches', 'on', '--env', cluster.flagsEnv],
      operator,
      cwd,
    );
    expect(back.code, back.stderr).toBe(0);
    receiver.close();
    sender.close();
    expect(pageErrors).toEqual([]);
  }, 90_000);
});

describe("a page of another loopback server in the operator's browser", () => {
  it('cannot flip a flag with the console cookie (a no-cors fetch needs no preflight): 403, the file unchanged', async () => {
    const flagsFile = join(cluster.flagsDir, `${cluster.flagsEnv}.json`);
    const before = readFileSync(flagsFile, 'utf8');
    // The operator's browser holds the key cookie (the first test opened the console's URL), and
    // SameSite=Strict sends it from 127.0.0.1:<any port>: the same site.
    expect((await page.context().cookies(consoleUrl)).map((cookie) => cookie.name)).toContain(
      'wb_console_key',
    );
    const decoy = `<!doctype html><script>
      fetch(${JSON.stringify(`${consoleUrl}/api/flags`)}, {
        method: 'POST', mode: 'no-cors', credentials: 'include',
        headers: { 'content-type': 'text/plain' }, body: '{"flag":"ha.audit","value":false}',
      }).then(() => { document.title = 'sent'; }, (error) => { document.title = 'failed: ' + error; });
    </script>`;
    const attacker = createServer((_, response) => {
      response.writeHead(200, { 'content-type': 'text/html' }).end(decoy);
    });
    await new Promise<void>((resolve) => attacker.listen(0, '127.0.0.1', resolve));
    const attackerOrigin = `http://127.0.0.1:${(attacker.address() as AddressInfo).port}`;
    const decoyPage = await page.context().newPage();
    try {
      const answered = decoyPage.waitForResponse((response) => response.url().endsWith('/api/flags'));
      await decoyPage.goto(`${attackerOrigin}/`);
      const response = await answered;
      expect(response.status()).toBe(403);
      await waitFor(async () => (await decoyPage.title()) === 'sent', { what: 'the decoy fetch answered' });
    } finally {
      await decoyPage.close();
      await new Promise((resolve) => attacker.close(resolve));
    }
    expect(readFileSync(flagsFile, 'utf8')).toBe(before);
    expect(await actingOnEveryNode('ha.audit', true)).toBe(true);
  });
});

describe('workbench console: bad calls', () => {
  it('a bad port is a usage error (2); no cluster here is a failure (1); a foreign Host header is refused', async () => {
    const badPort = await runWorkbench(['console', '--port', 'http'], {}, cwd);
    expect(badPort.code).toBe(2);
    expect(badPort.stderr).toContain('--port must be a port number');
    const empty = mkdtempSync(join(tmpdir(), 'wb-console-empty-'));
    try {
      const none = await runWorkbench(['console', '--port', '0'], {}, empty);
      expect(none.code).toBe(1);
      expect(none.stderr).toContain('no local cluster here');
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
    // DNS rebinding: a page of another name resolved to 127.0.0.1 must not read the token.
    const status = await new Promise<number | undefined>((resolve, reject) => {
      const url = new URL(consoleUrl);
      request(
        { host: url.hostname, port: url.port, path: '/', headers: { host: 'evil.example:80' } },
        (response) => {
          response.resume();
          resolve(response.statusCode);
        },
      )
        .on('error', reject)
        .end();
    });
    expect(status).toBe(421);
    // Without its key (another account of this machine reaching loopback), nothing is served, and the
    // page never carries the admin token.
    for (const path of ['/', '/api/state', '/peer', '/console.js']) {
      const response = await fetch(`${consoleUrl}${path}`);
      expect(response.status, path).toBe(401);
      expect(await response.text()).toContain('console key');
    }
    const flip = await fetch(`${consoleUrl}/api/flags`, {
      method: 'POST',
      body: '{"flag":"ha.audit","value":false}',
    });
    expect(flip.status).toBe(401);
    const withKey = await fetch(`${consoleUrl}/?key=${consoleKey}`);
    expect(withKey.headers.get('set-cookie')).toMatch(/HttpOnly; SameSite=Strict/);
    expect(await withKey.text()).not.toContain(cluster.adminToken);
  });
});

describe('a browser peer through the load balancer (the SDK in Chromium)', () => {
  it('receives messages from a Node peer, and every one sent while its node is killed after reconnecting', async () => {
    const {
      meshId,
      members: [browserMember, nodeMember],
    } = await meshWithTwoMembers('browser-peer');

    const peerPage = await browser.newPage();
    peerPage.on('pageerror', (error) => pageErrors.push(error.message));
    const query = new URLSearchParams({ meshId, ...browserMember });
    await peerPage.goto(`${consoleUrl}/peer?${query}&key=${consoleKey}`);
    await waitFor(async () => (await peerPage.textContent('[data-testid="status"]')) === 'connected', {
      timeoutMs: 15_000,
      what: 'the browser peer connected',
    });
    const firstNode = (await peerPage.textContent('[data-testid="node"]'))!;
    expect(cluster.nodes.map((n) => n.id)).toContain(firstNode);

    // The sender talks to the other nodes directly, so killing the browser's node leaves it connected.
    const others = cluster.nodes.filter((n) => n.id !== firstNode);
    const sender = await connectPeer(
      others.map((n) => `${n.url.replace(/^http/, 'ws')}/ws`),
      { meshId, members: [browserMember, nodeMember] },
      nodeMember,
    );
    const count = () => peerPage.textContent('[data-testid="count"]').then(Number);
    for (let i = 1; i <= 5; i++) await sender.send(browserMember.pubkey, `before ${i}`);
    await waitFor(async () => (await count()) === 5, { timeoutMs: 10_000, what: 'the first 5 messages' });

    const kill = await runWorkbench(['node', 'kill', firstNode], {}, cwd);
    expect(kill.code, kill.stderr).toBe(0);
    const killedAt = Date.now();
    for (let i = 1; i <= 10; i++) await sender.send(browserMember.pubkey, `during ${i}`);
    const secondNode = await waitFor(
      async () => {
        const node = await peerPage.textContent('[data-testid="node"]');
        const status = await peerPage.textContent('[data-testid="status"]');
        return status === 'connected' && node !== firstNode ? node : undefined;
      },
      { timeoutMs: 15_000, what: 'the browser peer welcomed by another node' },
    );
    console.log(
      `browser peer: back on ${secondNode} ${Date.now() - killedAt} ms after ${firstNode} was killed`,
    );
    await waitFor(async () => (await count()) === 15, { timeoutMs: 15_000, what: 'all 15 messages' });
    // A last message behind the 15: the member's feed writes in seq order (a replay too), so once it is
    // shown no late duplicate of an earlier one is still on its way.
    await sender.send(browserMember.pubkey, 'last');
    await waitFor(async () => (await count()) >= 16, { timeoutMs: 15_000, what: 'the last message' });
    const bodies = await peerPage.$$eval('[data-testid="messages"] li', (items) =>
      items.map((li) => li.textContent),
    );
    expect(bodies.sort()).toEqual(
      [
        ...Array.from({ length: 5 }, (_, i) => `before ${i + 1}`),
        ...Array.from({ length: 10 }, (_, i) => `during ${i + 1}`),
        'last',
      ].sort(),
    );
    expect(Number(await peerPage.textContent('[data-testid="welcomes"]'))).toBeGreaterThanOrEqual(2);

    // The console shows live message rates: 20 more messages (within the sender's quota, one at a time), and
    // the page's next sample shows their rate.
    const sending = (async () => {
      for (let i = 1; i <= 20; i++) await sender.send(browserMember.pubkey, `rate ${i}`);
    })();
    await waitFor(async () => Number(await page.textContent('[data-testid="rate-accepted"]')) > 0, {
      timeoutMs: 5000,
      intervalMs: 10,
      what: 'a message rate on the console',
    });
    await page.screenshot({ path: join(ARTIFACTS, 'console-rates.png'), fullPage: true });
    await peerPage.screenshot({ path: join(ARTIFACTS, 'browser-peer.png'), fullPage: true });
    await sending;
    expect(pageErrors).toEqual([]);
    await peerPage.close();
  }, 90_000);
});
