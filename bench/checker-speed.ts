/**
 * h) The history checkers' speed (`workbench chaos check`, issue 26): a clean history the size of a
 * 10-minute chaos run is generated (by the real HistoryWriter, with the shapes the workloads record:
 * per second 6 DMs and 1.5 broadcasts to 7 peers, 3 stream publishes received by 7, 30 clock ticks
 * (3 observers), a schedule every 1.5 s seen by 3 witnesses, 9 audit entries), `--scale N` times the
 * message and stream rates; then checked RUNS times by `checkHistory`, the same code as the command.
 * Reports operations per second (median) and the wall time of a check.
 * Standalone: `npm run build && node dist/bench/checker-speed.js [--scale 1] [--runs 5] [--seconds 600]`.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { checkHistory } from '../cli/checkers/check.js';
import { HistoryWriter } from '../cli/history/writer.js';
import { median, round } from './lib/stats.js';

export interface CheckerSpeedResult {
  seconds: number;
  scale: number;
  operations: number;
  bytes: number;
  writtenPerSecond: number;
  checkSeconds: number[];
  medianOperationsPerSecond: number;
  medianCheckSeconds: number;
}

const PEERS = 8; // per mesh: each message and stream frame goes to the 7 others

/** Writes a clean history of `seconds` of the chaos workload, `scale` times its message rates. */
function generate(path: string, seconds: number, scale: number): number {
  const writer = new HistoryWriter(path);
  const peer = (i: number) => `peer${(i % PEERS).toString().padStart(58, '0')}`;
  const seqs = new Map<string, number>();
  let n = 0;
  const message = (from: string, to: string[], kind: string) => {
    const seq = seqs.get(from) ?? 0;
    seqs.set(from, seq + 1);
    const value = { mesh: 'm1', kind, from, to, id: `load-${from}-${seq}`, seq };
    const messageId = `${++n}-abcdef`;
    writer.record({ type: 'invoke', f: 'send', process: from, value });
    writer.record({ type: 'ok', f: 'send', process: from, value: { ...value, messageId } });
    for (const recipient of to) {
      const v = { mesh: 'm1', recipient, from, seq, messageId };
      writer.record({ type: 'ok', f: 'deliver', process: recipient, value: v });
      writer.record({ type: 'info', f: 'ack', process: recipient, value: { recipient, messageId } });
    }
  };
  let streamSeq = 0;
  const others = (i: number) => Array.from({ length: PEERS - 1 }, (_, j) => peer(i + j + 1));
  for (let s = 0, tick = 0, audit = 0, sched = 0; s < seconds; s++) {
    for (let k = 0; k < 6 * scale; k++) message(peer(s + k), [peer(s + k + 1)], 'dm');
    for (let k = 0; k < 1.5 * scale; k++) message(peer(s * 3 + k), others(s * 3 + k), 'broadcast');
    for (let k = 0; k < 3 * scale; k++) {
      const publisher = peer(s + k);
      const value = { mesh: 'm1', stream: 'load', publisher, seq: streamSeq++ };
      writer.record({ type: 'invoke', f: 'stream-publish', process: publisher, value });
      writer.record({ type: 'ok', f: 'stream-publish', process: publisher, value });
      for (const subscriber of others(s + k))
        writer.record({
          type: 'ok',
          f: 'stream-receive',
          process: subscriber,
          value: { ...value, subscriber },
        });
    }
    for (let k = 0; k < 10; k++, tick++)
      for (const observer of ['o1', 'o2', 'o3'])
        writer.record({
          type: 'ok',
          f: 'clock-tick',
          process: observer,
          value: { mesh: 'c', tick, epoch: 1 + Math.floor(tick / 1000), observer },
        });
    if (s % 3 !== 2) {
      const scheduleId = `s${sched++}`;
      writer.record({ type: 'ok', f: 'schedule-create', process: 'sch', value: { scheduleId, once: true } });
      for (const w of ['w1', 'w2', 'w3'])
        writer.record({
          type: 'ok',
          f: 'schedule-fire',
          process: w,
          value: { scheduleId, occurrence: 1, messageId: `f${scheduleId}` },
        });
    }
    for (let k = 0; k < 9; k++, audit++)
      writer.record({
        type: 'info',
        f: 'audit-append',
        process: 'audit',
        value: { mesh: 'a', seq: audit + 1, hash: `h${audit + 1}`, prevHash: `h${audit}` },
      });
  }
  writer.close();
  return writer.count;
}

export async function benchCheckerSpeed(options: {
  seconds: number;
  scale: number;
  runs: number;
}): Promise<CheckerSpeedResult> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-checker-'));
  try {
    const path = join(dir, 'history.jsonl');
    const started = performance.now();
    const operations = generate(path, options.seconds, options.scale);
    const writeSeconds = (performance.now() - started) / 1000;
    const checkSeconds: number[] = [];
    for (let run = 0; run < options.runs; run++) {
      const result = await checkHistory(path);
      if (!result.ok)
        throw new Error(`the generated history has anomalies: ${JSON.stringify(result.counts)}`);
      checkSeconds.push(round(result.seconds, 3));
    }
    const medianCheckSeconds = median(checkSeconds);
    return {
      seconds: options.seconds,
      scale: options.scale,
      operations,
      bytes: statSync(path).size,
      writtenPerSecond: Math.round(operations / writeSeconds),
      checkSeconds,
      medianOperationsPerSecond: Math.round(operations / medianCheckSeconds),
      medianCheckSeconds,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const arg = (name: string, fallback: number) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? Math.max(1, Number(process.argv[i + 1]) || fallback) : fallback;
  };
  const result = await benchCheckerSpeed({
    seconds: arg('--seconds', 600),
    scale: arg('--scale', 1),
    runs: arg('--runs', 5),
  });
  console.log(JSON.stringify({ scenario: 'checker-speed', ...result }));
}
