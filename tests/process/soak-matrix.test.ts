/**
 * `workbench soak` as a user runs it: bad calls exit 2 before anything starts (no output folder made), and a
 * real matrix of the soak alone (`--seeds 0 --soak 30s`: a real `workbench chaos` child with its own Postgres,
 * Redis and cluster) writes its cell to results.jsonl and the verdict to summary.md, exit 0.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readCells } from '../../cli/soak/matrix.js';
import { runWorkbench } from '../helpers/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'soak-matrix-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('workbench soak', () => {
  it.each([
    [['--seeds', 'x'], /--seeds must be a whole number from 0 to 1000, not "x"/],
    [['--soak', '10s'], /--soak must be 0 or from 30s to 24h/],
    [['--plant-duration', '5s'], /--plant-duration must be from 30s to 1h/],
    [['extra'], /unexpected argument "extra"/],
  ])('%j exits 2 naming the mistake, and starts nothing', async (args, message) => {
    const out = join(dir, `bad-${args[0]}`);
    const run = await runWorkbench(['soak', ...args, '--out', out]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(message);
    expect(existsSync(out)).toBe(false);
  });

  it('--seeds 0 --soak 30s: one real chaos soak, its cell recorded and its verdict in summary.md', async () => {
    const out = join(dir, 'soak');
    const run = await runWorkbench(
      ['soak', '--seeds', '0', '--soak', '30s', '--soak-seed', '7', '--out', out],
      {},
      undefined,
      { timeoutMs: 170_000 },
    );
    expect(run.code, run.stdout + run.stderr).toBe(0);
    const cells = readCells(join(out, 'results.jsonl'));
    expect(cells).toHaveLength(1);
    expect(cells[0]).toMatchObject({
      kind: 'soak',
      seed: 7,
      durationMs: 30_000,
      exit: 0,
      ok: true,
      failed: [],
    });
    expect((cells[0] as { faults: number }).faults).toBeGreaterThan(0);
    const summary = readFileSync(join(out, 'summary.md'), 'utf8');
    expect(summary).toContain('Soak: seed 7, 0.5 min, every fault kind: every property held');
    expect(summary).toContain('Verdict: every plant caught often enough, the soak held.');
  }, 180_000);
});
