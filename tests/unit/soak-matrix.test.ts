/**
 * The nightly matrix's bookkeeping (cli/soak/matrix.ts): which cells it runs with which `workbench chaos`
 * arguments, how a report's JSON becomes a verdict (a plant is caught only when the run failed AND named the
 * plant's anomaly), the table, and `--resume`. The chaos runs themselves are real in
 * tests/cluster/chaos-plants.test.ts; here a stand-in answers with the report shapes chaos prints, so the
 * edge cases (no JSON, a failure for another reason) can be written down.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  type ChaosOutcome,
  type MatrixPlan,
  plantVerdict,
  readCells,
  runMatrix,
  soakVerdict,
  summarize,
} from '../../cli/soak/matrix.js';

const dir = mkdtempSync(join(tmpdir(), 'soak-matrix-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const outcome = (exit: number, report: unknown): ChaosOutcome => ({
  exit,
  stdout: typeof report === 'string' ? report : JSON.stringify(report),
  stderr: '',
  seconds: 1,
});
const caughtReport = (name: string, anomaly: string) => ({
  ok: false,
  plant: { name, caught: true, anomaly },
  properties: [{ name: 'history', ok: false }],
  faults: [],
});

describe('plantVerdict', () => {
  it('caught: exit 1 and the plant section says caught, naming the anomaly', () => {
    const cell = plantVerdict('p', 3, outcome(1, caughtReport('p', 'duplicate')));
    expect(cell).toMatchObject({ plant: 'p', seed: 3, caught: true, anomaly: 'duplicate' });
  });

  it('not caught: the run passed, failed without naming the plant, or printed no JSON', () => {
    const missed = { ok: true, plant: { name: 'p', caught: false }, properties: [], faults: [] };
    expect(plantVerdict('p', 1, outcome(0, missed)).caught).toBe(false);
    // exit 1 for another reason (the run could not be made) with caught false: not a catch
    const broken = { ok: false, plant: { name: 'p', caught: false }, error: 'postgres did not start' };
    expect(plantVerdict('p', 1, outcome(1, broken))).toMatchObject({
      caught: false,
      error: 'postgres did not start',
    });
    expect(plantVerdict('p', 1, outcome(2, 'usage: …')).error).toMatch(/no JSON report \(exit 2\)/);
    // a report about another plant is not this plant's verdict
    expect(plantVerdict('p', 1, outcome(1, caughtReport('q', 'lost'))).caught).toBe(false);
    // a report that says caught with exit 0 is contradictory: not a catch
    expect(plantVerdict('p', 1, outcome(0, caughtReport('p', 'lost'))).caught).toBe(false);
  });
});

describe('soakVerdict', () => {
  it('holds only when exit 0, ok and every property held; names the failed ones', () => {
    const held = { ok: true, properties: [{ name: 'a', ok: true }], faults: [{}, {}] };
    expect(soakVerdict(9, 60_000, outcome(0, held))).toMatchObject({ ok: true, failed: [], faults: 2 });
    const failed = {
      ok: false,
      properties: [
        { name: 'a', ok: true },
        { name: 'history', ok: false },
      ],
      faults: [],
    };
    expect(soakVerdict(9, 60_000, outcome(1, failed))).toMatchObject({ ok: false, failed: ['history'] });
    expect(soakVerdict(9, 60_000, outcome(0, { ok: true, properties: [] })).ok).toBe(false);
  });
});

describe('runMatrix', () => {
  const plan: MatrixPlan = {
    plants: ['p', 'q'],
    seeds: [5, 6],
    plantDurationMs: 120_000,
    soakDurationMs: 60_000,
    soakSeed: 7,
  };

  it('runs plants × seeds with the chaos arguments, then the soak; the table says who was caught', async () => {
    const calls: string[][] = [];
    const run = async (args: string[]) => {
      calls.push(args);
      if (args[0] === '--plant') {
        const [plant, seed] = [args[1]!, Number(args[3])];
        // q escapes seed 6
        if (plant === 'q' && seed === 6) return outcome(0, { ok: true, plant: { name: 'q', caught: false } });
        return outcome(1, caughtReport(plant, plant === 'p' ? 'duplicate' : 'lost-write'));
      }
      return outcome(0, { ok: true, properties: [{ name: 'history', ok: true }], faults: [{}] });
    };
    const out = join(dir, 'a');
    const result = await runMatrix(plan, run, {
      out,
      resume: false,
      log: () => {},
      signal: new AbortController().signal,
    });
    expect(calls).toEqual([
      ['--plant', 'p', '--seed', '5', '--duration', '120s', '--json'],
      ['--plant', 'p', '--seed', '6', '--duration', '120s', '--json'],
      ['--plant', 'q', '--seed', '5', '--duration', '120s', '--json'],
      ['--plant', 'q', '--seed', '6', '--duration', '120s', '--json'],
      ['--seed', '7', '--duration', '60s', '--json'],
    ]);
    expect(result.ok).toBe(false);
    expect(result.markdown).toContain('| p | 2/2 | 2 | 100 % | duplicate | – |');
    expect(result.markdown).toContain('| q | 2/2 | 1 | 50 % | lost-write | 6 |');
    expect(result.markdown).toContain('every property held (1 faults');
    expect(readFileSync(join(out, 'summary.md'), 'utf8')).toBe(result.markdown);
    expect(readCells(join(out, 'results.jsonl'))).toHaveLength(5);
  });

  it("keeps each cell's stderr, where a crash's stack is (the table names its last line only)", async () => {
    const out = join(dir, 'stderr');
    const crash = async () => ({
      ...outcome(1, ''),
      stderr: 'log line\nTypeError: boom\n    at x\nNode.js v20\n',
    });
    const result = await runMatrix({ ...plan, plants: ['p'], seeds: [5], soakDurationMs: 0 }, crash, {
      out,
      resume: false,
      log: () => {},
      signal: new AbortController().signal,
    });
    expect(result.markdown).toContain('5 (no JSON report (exit 1): Node.js v20)');
    expect(readFileSync(join(out, 'stderr', 'p-5.log'), 'utf8')).toContain('TypeError: boom');
  });

  it('--resume runs only the cells results.jsonl lacks; every plant caught and the soak held is ok', async () => {
    const out = join(dir, 'b');
    const all = async (args: string[]) =>
      args[0] === '--plant'
        ? outcome(1, caughtReport(args[1]!, 'x'))
        : outcome(0, { ok: true, properties: [{ name: 'history', ok: true }], faults: [] });
    const stop = new AbortController();
    let n = 0;
    // cut after the second cell, as a Ctrl-C would
    const cut = async (args: string[]) => {
      if (++n === 2) stop.abort();
      return all(args);
    };
    const first = await runMatrix(plan, cut, { out, resume: false, log: () => {}, signal: stop.signal });
    expect(first.interrupted).toBe(true);
    expect(readCells(join(out, 'results.jsonl'))).toHaveLength(1);
    const calls: string[][] = [];
    const rest = await runMatrix(
      plan,
      async (args) => {
        calls.push(args);
        return all(args);
      },
      { out, resume: true, log: () => {}, signal: new AbortController().signal },
    );
    expect(calls.map((a) => a.slice(0, 4).join(' '))).toEqual([
      '--plant p --seed 6',
      '--plant q --seed 5',
      '--plant q --seed 6',
      '--seed 7 --duration 60s',
    ]);
    expect(rest.ok).toBe(true);
    expect(summarize(plan, readCells(join(out, 'results.jsonl'))).ok).toBe(true);
  });
});
