/**
 * The history writer and reader (cli/history/): what is recorded is read back whole, in order, with
 * growing indexes and times; the buffer is written out once it is full, not only at the end; a write that
 * fails is kept and thrown at close (the run fails clearly); the reader names the line it cannot read.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type HistoryEvent, HistoryFormatError } from '../../cli/history/format.js';
import { readHistory } from '../../cli/history/read.js';
import { HistoryWriter } from '../../cli/history/writer.js';

const dir = mkdtempSync(join(tmpdir(), 'history-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the history writer', () => {
  it('writes JSON lines the reader reads back, indexes 0… and monotonic times', async () => {
    const path = join(dir, 'a.jsonl');
    const writer = new HistoryWriter(path);
    for (let i = 0; i < 1000; i++)
      writer.record({ type: i % 2 ? 'ok' : 'invoke', f: 'send', process: `p${i % 7}`, value: { seq: i } });
    writer.close();
    const events: HistoryEvent[] = [];
    expect(await readHistory(path, (e) => events.push(e))).toBe(1000);
    expect(events.map((e) => e.index)).toEqual([...Array(1000).keys()]);
    expect(events.every((e, i) => i === 0 || e.time >= events[i - 1]!.time)).toBe(true);
    expect(events[999]).toMatchObject({ type: 'ok', f: 'send', process: 'p5', value: { seq: 999 } });
  });

  it('writes its buffer out when it is full, without waiting for close', () => {
    const path = join(dir, 'b.jsonl');
    const writer = new HistoryWriter(path);
    const value = { pad: 'x'.repeat(1000) };
    for (let i = 0; i < 300; i++) writer.record({ type: 'info', f: 'fault', process: 'nemesis', value });
    // 300 lines of ~1.1 KB: over the 256 KiB buffer, so most of it is on disk already.
    expect(statSync(path).size).toBeGreaterThan(200_000);
    writer.close();
    expect(readFileSync(path, 'utf8').split('\n')).toHaveLength(301);
  });

  it('fails clearly: a path it cannot create, a write that fails (disk full), an event too large', () => {
    expect(() => new HistoryWriter(join(dir, 'no/such/folder/h.jsonl'))).toThrow(/^cannot write the history/);
    const full = new HistoryWriter('/dev/full');
    full.record({ type: 'info', f: 'fault', process: 'nemesis', value: {} });
    expect(() => full.close()).toThrow(/^writing the history \/dev\/full failed: ENOSPC/);
    const path = join(dir, 'c.jsonl');
    const big = new HistoryWriter(path);
    big.record({ type: 'info', f: 'fault', process: 'nemesis', value: { pad: 'x'.repeat(70_000) } });
    expect(() => big.close()).toThrow(/history event 0 \(fault\) is over 65536 bytes/);
  });
});

describe('the history reader', () => {
  it('names the first line it cannot read', async () => {
    const path = join(dir, 'd.jsonl');
    const good = JSON.stringify({ type: 'ok', f: 'ack', process: 'p', time: 0, value: {}, index: 0 });
    for (const [text, line, reason] of [
      [`${good}\n${good}\nnot json\n`, 3, /not JSON/],
      [`${good}\n\n${good}\n`, 2, /empty line/],
      [`${good}\n[1]\n`, 2, /not a JSON object/],
      [`${good.replace('"ok"', '"maybe"')}\n`, 1, /"type" must be one of invoke, ok, fail, info/],
      [`${good.replace('"time":0', '"time":-1')}\n`, 1, /"time" must be a number ≥ 0/],
      [`${good.replace('"process":"p"', '"process":""')}\n`, 1, /"process"/],
      [`${good.replace('"value":{}', '"value":3')}\n`, 1, /"value" must be a JSON object/],
    ] as const) {
      writeFileSync(path, text);
      const error = await readHistory(path, () => {}).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(HistoryFormatError);
      expect((error as HistoryFormatError).line).toBe(line);
      expect((error as Error).message).toMatch(reason);
    }
    expect(existsSync(join(dir, 'none'))).toBe(false);
    await expect(readHistory(join(dir, 'none'), () => {})).rejects.toThrow(/ENOENT/);
  });
});
