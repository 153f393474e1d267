/**
 * The promotion and shadow panels of the console (headless Chromium, /usr/bin/chromium via playwright-core)
 * and `workbench status` (text and --json), against a real phase-1 local cluster (`workbench up`) and a real
 * Prometheus (issue 27 item 5):
 *
 * - shadow: `ha.connection-cap` and `ha.rate-limits` set to "shadow" in the cluster's flags file, with the
 *   planted divergence armed on the brokers (`shadow-divergence`: every shared answer differs), so each
 *   admission and send is a counted mismatch; the page's counts move as traffic comes, the mismatches listed;
 * - promotion: a real `workbench promote --to 2 --analysis` whose baseline measures a steady series 8 times
 *   (1 s apart) and one with no data: while it runs the page shows the lock's holder and the measurements
 *   arriving; then the baseline pauses (no data is inconclusive), the page and status show the pause and
 *   the measurements; `--abort` ends it; a lock taken through the promotion's own lock code is shown with
 *   its holder.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateMemberKeys } from '@mesh-broker/sdk';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import type { ClusterFile } from '../../cli/cluster/local.js';
import { acquirePromotionLock } from '../../cli/promotion/lock.js';
import { flagsFile, writeFlagsFile } from '../../flags/file-store.js';
import { phasePreset } from '../../flags/registry.js';
import { runWorkbench, WORKBENCH } from '../helpers/cli.js';
import { FAST_CLUSTER } from '../helpers/cluster.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { startPrometheus, type TestPrometheus } from '../helpers/prometheus.js';
import { waitFor } from '../helpers/wait.js';

/** Screenshots, for people to look at (git-ignored). */
const ARTIFACTS = join(packageRoot(), 'test-results', 'console');
const SHADOWED = ['ha.connection-cap', 'ha.rate-limits'] as const;

let db: TestDatabase;
let cwd: string;
let cluster: ClusterFile;
let prometheus: TestPrometheus;
let consoleProcess: ChildProcess | undefined;
let consoleUrl: string;
let browser: Browser;
let page: Page;
const pageErrors: string[] = [];

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
      if (/console: http:\/\/127\.0\.0\.1:\d+\//.test(output))
        resolve(readFileSync(join(cwd, '.workbench', 'console.url'), 'utf8').trim());
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.on('exit', (code) => reject(new Error(`workbench console exited (${code}):\n${output}`)));
  });
}

async function adminCall(path: string, body: unknown): Promise<Record<string, string>> {
  const response = await fetch(`${cluster.nodes[0]!.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${cluster.adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(response.ok, `${path}: ${response.status}`).toBe(true);
  return (await response.json()) as Record<string, string>;
}

/** Every node compares both shadowed rows. */
async function shadowRunningEverywhere(): Promise<boolean> {
  const reports = await Promise.all(
    cluster.nodes.map(async (node) => {
      const response = await fetch(`${node.url}/admin/shadow`, {
        headers: { authorization: `Bearer ${cluster.adminToken}` },
      });
      const { rows } = (await response.json()) as { rows: Array<{ flag: string; running: boolean }> };
      return SHADOWED.every((flag) => rows.find((row) => row.flag === flag)?.running);
    }),
  );
  return reports.every(Boolean);
}

/** A peer admitted on the first node (one cap comparison) that sends `count` messages (rate-limit comparisons). */
async function traffic(count: number) {
  const { meshId } = await adminCall('/admin/meshes', { name: `shadow-${Date.now()}` });
  const members = [generateMemberKeys(), generateMemberKeys()];
  for (const member of members) await adminCall(`/admin/meshes/${meshId}/members`, { pubkey: member.pubkey });
  const mesh = { meshId: meshId!, members };
  const ws = `${cluster.nodes[0]!.url.replace(/^http/, 'ws')}/ws`;
  const sender = await connectPeer(ws, mesh, members[0]!);
  for (let i = 0; i < count; i++) await sender.send(members[1]!.pubkey, `m${i}`);
}

const count = async (flag: string, which: string) =>
  Number(await page.textContent(`[data-testid="shadow"] tr[data-flag="${flag}"] td[data-count="${which}"]`));

beforeAll(async () => {
  db = await createTestDatabase('console_promotion');
  cwd = mkdtempSync(join(tmpdir(), 'wb-console-promotion-'));
  prometheus = await startPrometheus({});
  const up = await runWorkbench(
    ['up', '--phase', '1', '--port', '0', '--database-url', db.url],
    { ...FAST_CLUSTER, SEND_BURST: '100', WORKBENCH_TEST_PLANTS: '1', WORKBENCH_PLANT: 'shadow-divergence' },
    cwd,
  );
  expect(up.code, up.stderr).toBe(0);
  cluster = JSON.parse(readFileSync(join(cwd, '.workbench', 'cluster.json'), 'utf8')) as ClusterFile;
  // Phase 1's preset with the two phase-2 rows in shadow, written as the file provider writes it.
  writeFlagsFile(flagsFile(cluster.flagsDir, cluster.flagsEnv), phasePreset(1), [...SHADOWED]);
  await waitFor(shadowRunningEverywhere, { timeoutMs: 15_000, what: 'shadow comparators on every node' });
  consoleUrl = await startConsole();
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  page = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
  page.on('pageerror', (error) => pageErrors.push(error.message));
  await page.goto(consoleUrl);
}, 120_000);

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
  await prometheus?.stop();
  await db?.drop();
}, 60_000);

describe('the console and status show shadow agreement and promotion activity', () => {
  it('shadow: each shadowed row with its counts, moving as traffic comes, and its mismatches', async () => {
    await traffic(3);
    for (const flag of SHADOWED)
      await page.waitForSelector(`[data-testid="shadow"] tr[data-flag="${flag}"]`, { timeout: 10_000 });
    await waitFor(async () => (await count('ha.rate-limits', 'disagree')) >= 3, {
      timeoutMs: 10_000,
      what: 'three rate-limit mismatches on the page',
    });
    const before = await count('ha.rate-limits', 'disagree');
    expect(await count('ha.rate-limits', 'agree')).toBe(0); // the plant makes every shared answer differ
    expect(
      await page.textContent('[data-testid="shadow"] tr[data-flag="ha.rate-limits"] td[data-count="ratio"]'),
    ).toBe('0.0 %');
    expect(await count('ha.connection-cap', 'disagree')).toBeGreaterThanOrEqual(1);
    // Live: more sends, more mismatches, without reloading the page.
    await traffic(4);
    await waitFor(async () => (await count('ha.rate-limits', 'disagree')) >= before + 4, {
      timeoutMs: 10_000,
      what: 'the page counting the new mismatches',
    });
    const mismatches = await page.$$eval('[data-testid="shadow-mismatches"] tr', (trs) =>
      trs.map((tr) => ({
        flag: tr.dataset.flag,
        cells: [...tr.querySelectorAll('td')].map((td) => td.textContent),
      })),
    );
    expect(mismatches.some((m) => m.flag === 'ha.rate-limits' && m.cells[3] === 'consume send')).toBe(true);
    expect(mismatches.some((m) => m.flag === 'ha.connection-cap' && m.cells[3]?.startsWith('admit '))).toBe(
      true,
    );
    expect(pageErrors).toEqual([]);

    const status = await runWorkbench(['status'], {}, cwd);
    expect(status.stdout).toMatch(/shadow ha\.rate-limits: agreement 0\.000 \(0 agree, \d+ disagree/);
    expect(status.stdout).toContain('newest mismatch');
    expect(status.stdout).toContain('promotion lock: free');
    expect(status.stdout).toContain('last analysis: none');
    const json = await runWorkbench(['status', '--env', cluster.flagsEnv, '--json'], {}, cwd);
    const parsed = JSON.parse(json.stdout) as {
      shadow: { rows: Array<{ flag: string; disagree: number; runningOn: string[]; mismatches: unknown[] }> };
      promotion: { lock: unknown; pause: unknown; analysis: unknown };
    };
    const limits = parsed.shadow.rows.find((row) => row.flag === 'ha.rate-limits')!;
    expect(limits.disagree).toBeGreaterThanOrEqual(before + 4);
    expect(limits.runningOn).toEqual(cluster.nodes.map((n) => n.id));
    expect(limits.mismatches.length).toBeGreaterThan(0);
    expect(parsed.promotion).toEqual({
      environment: cluster.flagsEnv,
      lock: null,
      pause: null,
      analysis: null,
    });
  });

  it('a promotion with an analysis: its lock and measurements live, then its pause; status says the same', async () => {
    const file = join(cwd, 'analysis.json');
    writeFileSync(
      file,
      JSON.stringify({
        metrics: [
          {
            name: 'steady',
            interval: '1s',
            count: 8,
            successCondition: 'result < 0.25',
            provider: { prometheus: { query: 'vector(0.0125)' } },
          },
          {
            name: 'no-data',
            initialDelay: '1s',
            successCondition: 'result < 1',
            provider: { prometheus: { query: 'absent(vector(1))' } },
          },
        ],
      }),
    );
    const promotion = runWorkbench(
      ['promote', '--env', cluster.flagsEnv, '--to', '2', '--analysis', file, '--prometheus', prometheus.url],
      { WORKBENCH_ACTOR: 'alice' },
      cwd,
      { timeoutMs: 60_000 },
    );
    // While it measures: the lock's holder, and the measurements arriving one by one.
    await page.waitForSelector('[data-testid="promotion-lock"][data-held="true"]', { timeout: 15_000 });
    expect(await page.textContent('[data-testid="promotion-lock"]')).toMatch(
      /^held by workbench-promote alice@/,
    );
    await page.waitForSelector('[data-testid="analysis-summary"][data-outcome="running"]', {
      timeout: 10_000,
    });
    const steady = '[data-testid="analysis"] tr[data-stage="baseline"][data-metric="steady"] .measurement';
    await waitFor(async () => (await page.$$(steady)).length >= 2, {
      timeoutMs: 10_000,
      what: 'two steady measurements on the page while it runs',
    });
    const whileRunning = (await page.$$(steady)).length;

    const result = await promotion;
    expect(result.code, result.stdout + result.stderr).toBe(5); // paused: no-data is inconclusive
    await page.waitForSelector('[data-testid="analysis-summary"][data-outcome="paused"]', {
      timeout: 10_000,
    });
    await page.waitForSelector('[data-testid="promotion-lock"][data-held="false"]', { timeout: 10_000 });
    const outcomes = await page.$$eval(steady, (spans) =>
      spans.map((s) => [s.dataset.outcome, s.textContent]),
    );
    expect(outcomes).toEqual(Array.from({ length: 8 }, () => ['successful', '0.0125']));
    expect(whileRunning).toBeLessThan(8);
    expect(
      await page.$$eval('[data-testid="analysis"] tr[data-metric="no-data"] .measurement', (spans) =>
        spans.map((s) => s.dataset.outcome),
      ),
    ).toEqual(['inconclusive']);
    expect(await page.textContent('[data-testid="promotion-pause"]')).toMatch(
      /^PAUSED: phase 1 → 2 at its baseline analysis \(no-data: .*by alice/,
    );
    expect(await page.textContent('[data-testid="analysis-summary"]')).toContain(
      'paused; baseline inconclusive on no-data',
    );
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'console-promotion.png'), fullPage: true });
    // The timeline (read every 2 s) shows the pause, not the 9 measurements.
    const timeline = await waitFor(
      async () => {
        const outcomes = await page.$$eval('[data-testid="timeline"] tr td:nth-child(4)', (tds) =>
          tds.map((td) => td.textContent),
        );
        return outcomes.some((t) => t?.startsWith('paused')) ? outcomes : undefined;
      },
      { timeoutMs: 10_000, what: 'the pause on the timeline' },
    );
    expect(timeline.filter((t) => t?.startsWith('paused'))).toHaveLength(1);
    expect(timeline.some((t) => t?.includes('measurement'))).toBe(false);

    const status = await runWorkbench(['status'], {}, cwd);
    expect(status.stdout).toContain('PAUSED: phase 1 → 2 at its baseline analysis (no-data:');
    expect(status.stdout).toMatch(
      /last analysis: phase 1 → 2 by alice from \S+, paused; baseline inconclusive on no-data/,
    );
    expect(status.stdout).toContain(
      `baseline steady: ${Array.from({ length: 8 }, (_, i) => `${i + 1}/8 successful 0.0125`).join(', ')}`,
    );
    expect(status.stdout).toContain('baseline no-data: 1/1 inconclusive');
    const json = JSON.parse(
      (await runWorkbench(['status', '--env', cluster.flagsEnv, '--json'], {}, cwd)).stdout,
    ) as {
      promotion: {
        pause: { stage: string; metric: string };
        analysis: {
          outcome: string;
          phase: string;
          metrics: Array<{ metric: string; measurements: unknown[] }>;
        };
      };
    };
    expect(json.promotion.pause).toMatchObject({ stage: 'baseline', metric: 'no-data' });
    expect(json.promotion.analysis).toMatchObject({ outcome: 'paused', phase: 'baseline' });
    expect(json.promotion.analysis.metrics.map((m) => [m.metric, m.measurements.length])).toEqual([
      ['steady', 8],
      ['no-data', 1],
    ]);

    // A human aborts: the pause goes, the run ends blocked, its baseline marked aborted.
    const abort = await runWorkbench(['promote', '--env', cluster.flagsEnv, '--to', '2', '--abort'], {}, cwd);
    expect(abort.code, abort.stdout + abort.stderr).toBe(3);
    await page.waitForSelector('[data-testid="analysis-summary"][data-outcome="blocked"]', {
      timeout: 10_000,
    });
    expect(await page.isHidden('[data-testid="promotion-pause"]')).toBe(true);
    expect(await page.textContent('[data-testid="analysis-summary"]')).toContain(
      'baseline inconclusive (aborted) on no-data',
    );
    expect(pageErrors).toEqual([]);
  });

  it('a lock held by another promotion: its holder on the page and in status', async () => {
    const lock = await acquirePromotionLock(cluster.databaseUrl, cluster.flagsEnv, 'carol');
    expect(lock.held).toBe(true);
    try {
      await page.waitForSelector('[data-testid="promotion-lock"][data-held="true"]', { timeout: 10_000 });
      expect(await page.textContent('[data-testid="promotion-lock"]')).toMatch(
        /^held by workbench-promote carol@/,
      );
      const status = await runWorkbench(['status'], {}, cwd);
      expect(status.stdout).toMatch(
        /promotion lock: held by workbench-promote carol@\S+ since \S+ \(\d+ s\)/,
      );
      const json = JSON.parse(
        (await runWorkbench(['status', '--env', cluster.flagsEnv, '--json'], {}, cwd)).stdout,
      ) as {
        promotion: { lock: { holder: string; stale: boolean } };
      };
      expect(json.promotion.lock.holder).toMatch(/^workbench-promote carol@/);
      expect(json.promotion.lock.stale).toBe(false);
    } finally {
      if (lock.held) await lock.release();
    }
    await page.waitForSelector('[data-testid="promotion-lock"][data-held="false"]', { timeout: 10_000 });
  });
});
