/**
 * The independent checkers (cli/checkers/) over synthetic histories written to a file and read back the
 * way `workbench chaos check` reads them: a clean history passes; each variant plants one anomaly, which
 * must be caught, named, and point at the right operations. A checker that cannot fail proves nothing.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type CheckResult, checkHistory } from '../../cli/checkers/check.js';
import type { EventType, HistoryEvent, Operation } from '../../cli/history/format.js';

const dir = mkdtempSync(join(tmpdir(), 'checkers-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

class History {
  readonly events: HistoryEvent[] = [];
  add(type: EventType, f: Operation, process: string, value: Record<string, unknown>): number {
    const index = this.events.length;
    this.events.push({ type, f, process, time: index * 10, value, index });
    return index;
  }
  send(from: string, seq: number, to: string[]): [number, number] {
    const value = {
      mesh: 'm',
      kind: to.length > 1 ? 'broadcast' : 'dm',
      from,
      to,
      id: `${from}-${seq}`,
      seq,
    };
    const invoke = this.add('invoke', 'send', from, value);
    return [invoke, this.add('ok', 'send', from, { ...value, messageId: `${from}-${seq}-id` })];
  }
  deliver(recipient: string, from: string, seq: number, session = recipient): number {
    const messageId = `${from}-${seq}-id`;
    const index = this.add('ok', 'deliver', session, { mesh: 'm', recipient, from, seq, messageId });
    this.add('info', 'ack', session, { recipient, messageId });
    return index;
  }
  publish(publisher: string, seq: number): void {
    const value = { mesh: 'm', stream: 'load', publisher, seq };
    this.add('invoke', 'stream-publish', publisher, value);
    this.add('ok', 'stream-publish', publisher, value);
  }
  receive(subscriber: string, publisher: string, seq: number): number {
    const value = { mesh: 'm', stream: 'load', publisher, seq, subscriber };
    return this.add('ok', 'stream-receive', subscriber, value);
  }
  tick(observer: string, tick: number, epoch: number): number {
    return this.add('ok', 'clock-tick', observer, { mesh: 'c', tick, epoch, observer });
  }
  audit(seq: number, hash: string, prevHash: string): number {
    return this.add('info', 'audit-append', 'audit', { mesh: 'm', seq, hash, prevHash });
  }
  async check(): Promise<CheckResult> {
    const path = join(dir, `h-${readdirSync(dir).length}.jsonl`);
    writeFileSync(path, this.events.map((e) => `${JSON.stringify(e)}\n`).join(''));
    return checkHistory(path);
  }
}

/** A run with every kind of operation and no anomaly; `plant` changes one thing before the check. */
function clean(
  plant: Partial<Record<'feed' | 'streams' | 'clock' | 'audit' | 'schedules', (h: History) => void>> = {},
) {
  const h = new History();
  h.add('info', 'fault', 'nemesis', { phase: 'start', kind: 'node-kill', target: 'broker-1' });
  if (plant.feed) plant.feed(h);
  else
    for (let seq = 0; seq < 4; seq++) {
      h.send('a', seq, ['b', 'c']);
      h.deliver('b', 'a', seq);
      h.deliver('c', 'a', seq);
    }
  if (plant.streams) plant.streams(h);
  else
    for (let seq = 0; seq < 3; seq++) {
      h.publish('a', seq);
      if (seq !== 1) h.receive('b', 'a', seq); // a loss is allowed: streams are at most once
    }
  h.add('invoke', 'schedule-create', 's', { mesh: 'm', to: 'b', at: 1, once: true });
  h.add('ok', 'schedule-create', 's', { mesh: 'm', to: 'b', at: 1, once: true, scheduleId: 'S1' });
  if (plant.schedules) plant.schedules(h);
  else {
    // one firing seen by two sessions of the recipient: one message id, one firing
    h.add('ok', 'schedule-fire', 'w1', { scheduleId: 'S1', occurrence: 1, messageId: 'x1' });
    h.add('ok', 'schedule-fire', 'w2', { scheduleId: 'S1', occurrence: 1, messageId: 'x1' });
  }
  if (plant.clock) plant.clock(h);
  else
    for (const [tick, epoch] of [
      [1, 1],
      [2, 1],
      [5, 2],
      [6, 2],
    ] as const)
      h.tick('o1', tick, epoch);
  if (plant.audit) plant.audit(h);
  else {
    h.audit(1, 'h1', 'genesis');
    h.audit(2, 'h2', 'h1');
    h.audit(3, 'h3', 'h2');
  }
  h.add('info', 'flag-flip', 'nemesis', { flag: 'ha.delivery', value: false });
  h.add('info', 'fault', 'nemesis', { phase: 'end', kind: 'node-kill', target: 'broker-1' });
  return h;
}

const kinds = (result: CheckResult) => Object.keys(result.counts).sort();

describe('the history checkers', () => {
  it('pass a clean history of every operation, and say what they judged', async () => {
    const result = await clean().check();
    expect(result.anomalies).toEqual([]);
    expect(result.ok).toBe(true);
    expect(result.summaries.feed).toBe('4 sends (4 ok), 8 deliveries, 8 acks');
    expect(result.summaries.streams).toMatch(/^3 publishes ok, 2 receives/);
    expect(result.summaries.schedules).toMatch(/^1 schedules \(1 created ok\), 2 fire events/);
    expect(result.summaries.clock).toMatch(/^4 ticks seen by 1 observers over 2 mesh epochs/);
    expect(result.summaries.audit).toBe('1 chains, 3 entries');
    expect(result.operationsPerSecond).toBeGreaterThan(0);
  });

  it('catch a lost write and name its send', async () => {
    let ops: number[] = [];
    const result = await clean({
      feed: (h) => {
        h.send('a', 0, ['b']);
        h.deliver('b', 'a', 0);
        ops = h.send('a', 1, ['b']); // never delivered
      },
    }).check();
    expect(kinds(result)).toEqual(['lost-write']);
    expect(result.anomalies[0]).toMatchObject({ kind: 'lost-write', operations: ops });
    expect(result.anomalies[0]!.message).toMatch(/^seq 1 from a to b: sent ok, never delivered/);
  });

  it('judge no loss for a send that was never ok (a timeout is no promise)', async () => {
    const result = await clean({
      feed: (h) => {
        h.add('invoke', 'send', 'a', { mesh: 'm', from: 'a', to: ['b'], id: 'x', seq: 0 });
        h.add('info', 'send', 'a', { mesh: 'm', from: 'a', to: ['b'], id: 'x', seq: 0, error: 'timeout' });
      },
    }).check();
    expect(result.ok).toBe(true);
  });

  it('catch a skip (seq n and n+2 but not n+1), with its lost write', async () => {
    let before = 0;
    let after = 0;
    let missing: number[] = [];
    const result = await clean({
      feed: (h) => {
        h.send('a', 0, ['b']);
        before = h.deliver('b', 'a', 0);
        missing = h.send('a', 1, ['b']);
        h.send('a', 2, ['b']);
        after = h.deliver('b', 'a', 2);
      },
    }).check();
    expect(kinds(result)).toEqual(['lost-write', 'skip']);
    const skip = result.anomalies.find((a) => a.kind === 'skip')!;
    expect(skip.operations).toEqual([before, ...missing, after]);
    expect(skip.message).toMatch(/got seq 0 and seq 2 but not this one/);
  });

  it('catch a duplicate delivery to one session, and not one to two sessions of a member', async () => {
    let first = 0;
    let again = 0;
    const result = await clean({
      feed: (h) => {
        h.send('a', 0, ['b']);
        first = h.deliver('b', 'a', 0, 'b-session-1');
        h.deliver('b', 'a', 0, 'b-session-2'); // another session of b: not a duplicate
        again = h.deliver('b', 'a', 0, 'b-session-1');
      },
    }).check();
    expect(kinds(result)).toEqual(['duplicate']);
    expect(result.anomalies[0]!.operations).toEqual([first, again]);
  });

  it('catch one send delivered under two messageIds (stored twice: the SDK cannot tell)', async () => {
    const result = await clean({
      feed: (h) => {
        h.send('a', 0, ['b']);
        h.deliver('b', 'a', 0);
        h.add('ok', 'deliver', 'b', { mesh: 'm', recipient: 'b', from: 'a', seq: 0, messageId: 'other-id' });
      },
    }).check();
    expect(kinds(result)).toEqual(['duplicate']);
    expect(result.anomalies[0]!.message).toBe('b got seq 0 from a twice (messageIds a-0-id, other-id)');
  });

  it('catch an internal nonmonotonic (a recipient sees a sender go back)', async () => {
    let high = 0;
    let low = 0;
    const result = await clean({
      feed: (h) => {
        h.send('a', 0, ['b']);
        h.send('a', 1, ['b']);
        high = h.deliver('b', 'a', 1);
        low = h.deliver('b', 'a', 0);
      },
    }).check();
    expect(kinds(result)).toEqual(['internal-nonmonotonic']);
    expect(result.anomalies[0]!.operations).toEqual([high, low]);
  });

  it('catch an external nonmonotonic (two recipients, opposite orders), naming both', async () => {
    const ops: number[] = [];
    const result = await clean({
      feed: (h) => {
        h.send('a', 0, ['b', 'c']);
        h.send('a', 1, ['b', 'c']);
        ops.push(h.deliver('b', 'a', 0), h.deliver('b', 'a', 1));
        ops.push(h.deliver('c', 'a', 1), h.deliver('c', 'a', 0));
      },
    }).check();
    // The one who saw them backwards saw its sender go back too: both are named.
    expect(kinds(result)).toEqual(['external-nonmonotonic', 'internal-nonmonotonic']);
    const external = result.anomalies.find((a) => a.kind === 'external-nonmonotonic')!;
    expect(external.operations).toEqual(ops);
    expect(external.message).toMatch(/seqs 0 and 1 from a: b got them in that order, c in the other/);
  });

  it('catch a message acknowledged and never delivered', async () => {
    let ack = 0;
    const result = await clean({
      feed: (h) => {
        h.send('a', 0, ['b']);
        h.deliver('b', 'a', 0);
        ack = h.add('info', 'ack', 'b', { recipient: 'b', messageId: 'a-9-id' });
      },
    }).check();
    expect(kinds(result)).toEqual(['acknowledged-never-delivered']);
    expect(result.anomalies[0]!.operations).toEqual([ack]);
  });

  it('catch a stream publish received twice, and one received out of publish order', async () => {
    const dup = await clean({
      streams: (h) => {
        h.publish('a', 0);
        h.receive('b', 'a', 0);
        h.receive('b', 'a', 0);
      },
    }).check();
    expect(kinds(dup)).toEqual(['stream-duplicate']);
    const order = await clean({
      streams: (h) => {
        h.publish('a', 0);
        h.publish('a', 1);
        h.receive('b', 'a', 1);
        h.receive('b', 'a', 0);
      },
    }).check();
    expect(kinds(order)).toEqual(['stream-reorder']);
    expect(order.anomalies[0]!.message).toMatch(/b got seq 1, then seq 0 \(load from a\)/);
  });

  it('catch a schedule occurrence fired twice, a one-off fired for two occurrences, one never fired', async () => {
    const twice = await clean({
      schedules: (h) => {
        h.add('ok', 'schedule-fire', 'w1', { scheduleId: 'S1', occurrence: 1, messageId: 'x1' });
        h.add('ok', 'schedule-fire', 'w2', { scheduleId: 'S1', occurrence: 1, messageId: 'x2' });
      },
    }).check();
    expect(kinds(twice)).toEqual(['schedule-fired-twice']);
    expect(twice.anomalies[0]!.message).toMatch(/schedule S1 occurrence 1 fired as 2 messages \(x1, x2\)/);
    const occurrences = await clean({
      schedules: (h) => {
        h.add('ok', 'schedule-fire', 'w1', { scheduleId: 'S1', occurrence: 1, messageId: 'x1' });
        h.add('ok', 'schedule-fire', 'w1', { scheduleId: 'S1', occurrence: 2, messageId: 'x2' });
      },
    }).check();
    expect(kinds(occurrences)).toEqual(['schedule-fired-twice']);
    const never = await clean({ schedules: () => {} }).check();
    expect(kinds(never)).toEqual(['schedule-never-fired']);
  });

  it('catch a clock tick repeated, and a tick of an older epoch after a newer one', async () => {
    const repeated = await clean({
      clock: (h) => {
        h.tick('o1', 1, 1);
        h.tick('o1', 2, 1);
        h.tick('o1', 2, 2);
        h.tick('o2', 1, 1); // another observer starts where it joins: judged apart
      },
    }).check();
    expect(kinds(repeated)).toEqual(['clock-nonincreasing']);
    const older = await clean({
      clock: (h) => {
        h.tick('o1', 1, 2);
        h.tick('o1', 2, 1);
      },
    }).check();
    expect(kinds(older)).toEqual(['clock-epoch-regress']);
  });

  it('excuse one repeated tick right after the observer moved (the tick in flight), and no other', async () => {
    const welcome = (h: History, observer: string, node: string) =>
      h.add('info', 'session-welcome', observer, { mesh: 'c', node, resumed: true, observer });
    const moved = await clean({
      clock: (h) => {
        welcome(h, 'o1', 'n1'); // the first welcome: nothing moved yet
        h.tick('o1', 79, 1);
        h.tick('o1', 80, 1);
        welcome(h, 'o1', 'n2');
        h.tick('o1', 80, 1); // from the node it joined, over the bus
        h.tick('o1', 81, 1);
      },
    }).check();
    expect(kinds(moved)).toEqual([]);
    const repeatedLater = await clean({
      clock: (h) => {
        h.tick('o1', 80, 1);
        welcome(h, 'o1', 'n2');
        h.tick('o1', 81, 1);
        h.tick('o1', 81, 1); // not the first tick after the move: a repeat
      },
    }).check();
    expect(kinds(repeatedLater)).toEqual(['clock-nonincreasing']);
  });

  it('catch an audit fork, a gap and a rewritten link', async () => {
    const fork = await clean({
      audit: (h) => {
        h.audit(1, 'h1', 'genesis');
        h.audit(2, 'h2', 'h1');
        h.audit(2, 'h2b', 'h1');
      },
    }).check();
    expect(kinds(fork)).toEqual(['audit-fork']);
    const gap = await clean({
      audit: (h) => {
        h.audit(1, 'h1', 'genesis');
        h.audit(3, 'h3', 'h2');
      },
    }).check();
    expect(kinds(gap)).toEqual(['audit-gap']);
    expect(gap.anomalies[0]!.message).toBe('chain m: seq 1 then seq 3 (1 missing)');
    const rewrite = await clean({
      audit: (h) => {
        h.audit(1, 'h1', 'genesis');
        h.audit(2, 'h2', 'h1');
        h.audit(3, 'h3', 'h-other');
      },
    }).check();
    expect(kinds(rewrite)).toEqual(['audit-rewrite']);
  });

  it('stop at a malformed line or a value that lacks a field, naming the line', async () => {
    const h = clean();
    const path = join(dir, 'bad.jsonl');
    const lines = h.events.map((e) => JSON.stringify(e));
    writeFileSync(path, `${[...lines.slice(0, 2), '{"type":"ok",', ...lines.slice(2)].join('\n')}\n`);
    await expect(checkHistory(path)).rejects.toThrow(/^line 3: not JSON/);
    const send = { ...h.events[1]!, value: { from: 'a' } };
    writeFileSync(path, `${[lines[0], JSON.stringify(send)].join('\n')}\n`);
    await expect(checkHistory(path)).rejects.toThrow('line 2: send: value.seq must be a number');
    writeFileSync(
      path,
      `${lines[0]}\n{"type":"ok","f":"teleport","process":"p","time":1,"value":{},"index":1}\n`,
    );
    await expect(checkHistory(path)).rejects.toThrow(/^line 2: "f" must be one of send, deliver/);
    await expect(checkHistory(join(dir, 'missing.jsonl'))).rejects.toThrow(/ENOENT/);
  });
});

describe('the checkers are independent of the code that drove the run', () => {
  it('import only the history format and reader, each other and node builtins', () => {
    const folder = join(import.meta.dirname, '../../cli/checkers');
    for (const name of readdirSync(folder)) {
      const text = readFileSync(join(folder, name), 'utf8');
      const specifiers = [...text.matchAll(/^(?:import|export)\b[^;]*?from '([^']+)';/gms)].map((m) => m[1]!);
      expect(specifiers.length, name).toBeGreaterThan(0);
      for (const specifier of specifiers)
        expect(
          /^node:|^\.\/[a-z-]+\.js$|^\.\.\/history\/(format|read)\.js$/.test(specifier),
          `${name} imports ${specifier}`,
        ).toBe(true);
    }
  });
});
