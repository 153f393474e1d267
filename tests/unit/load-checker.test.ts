import { describe, expect, it } from 'vitest';
import { DeliveryChecker } from '../../cli/load/checker.js';
import { buildReport, percentiles } from '../../cli/load/report.js';

const facts = {
  peers: 3,
  meshes: 1,
  nodes: ['ws://x/ws'],
  durationMs: 1000,
  refused: {},
  droppedBySdk: 0,
  drainMs: 0,
};

describe('the load delivery checker (a constructed event log, so it cannot pass vacuously)', () => {
  it('passes a clean log: every accepted message delivered once, in order', () => {
    const checker = new DeliveryChecker();
    for (let seq = 0; seq < 3; seq++) {
      checker.accept({ sender: 'a', kind: 'broadcast', seq, sentAt: seq, recipients: ['b', 'c'] });
      checker.receive({ recipient: 'b', sender: 'a', channel: 'message', seq, at: seq + 2 });
      checker.receive({ recipient: 'c', sender: 'a', channel: 'message', seq, at: seq + 4 });
    }
    const report = buildReport(checker.result(), facts);
    expect(report).toMatchObject({
      ok: true,
      lost: 0,
      duplicates: 0,
      reordered: 0,
      delivered: 6,
      expectedDeliveries: 6,
    });
    expect(report.latencyMs.broadcast).toMatchObject({ count: 6, p50: 2, max: 4 });
  });

  it('finds the recipient that missed a message, the one that got it twice, and a reordering', () => {
    const checker = new DeliveryChecker();
    checker.accept({ sender: 'a', kind: 'broadcast', seq: 0, sentAt: 0, recipients: ['b', 'c'] });
    checker.accept({ sender: 'a', kind: 'dm', seq: 1, sentAt: 1, recipients: ['b'] });
    checker.accept({ sender: 'a', kind: 'stream', seq: 0, sentAt: 1, recipients: ['c'] });
    checker.receive({ recipient: 'b', sender: 'a', channel: 'message', seq: 1, at: 3 }); // before seq 0
    checker.receive({ recipient: 'b', sender: 'a', channel: 'message', seq: 0, at: 4 }); // reordered
    checker.receive({ recipient: 'b', sender: 'a', channel: 'message', seq: 0, at: 5 }); // duplicate
    // c never gets the broadcast; its stream frame is a separate channel, in order on its own.
    checker.receive({ recipient: 'c', sender: 'a', channel: 'stream', seq: 0, at: 2 });
    const result = checker.result();
    expect(result).toMatchObject({
      lost: 1,
      duplicates: 1,
      reordered: 1,
      delivered: 3,
      expectedDeliveries: 4,
    });
    expect(result.examples).toEqual(
      expect.arrayContaining([
        { what: 'lost', kind: 'broadcast', sender: 'a', recipient: 'c', seq: 0 },
        { what: 'duplicate', kind: 'broadcast', sender: 'a', recipient: 'b', seq: 0 },
        { what: 'reordered', kind: 'broadcast', sender: 'a', recipient: 'b', seq: 0 },
      ]),
    );
    const report = buildReport(result, facts);
    expect(report.ok).toBe(false);
    expect(report.failures).toEqual([
      '1 deliveries lost',
      '1 duplicates after SDK dedup',
      '1 deliveries out of sender order',
    ]);
  });

  it('judges order among accepted messages only: a send whose reply never came may arrive late', () => {
    const checker = new DeliveryChecker();
    // seq 0's reply was lost with its node; stored after all, the sweep delivers it after seq 1.
    checker.accept({ sender: 'a', kind: 'dm', seq: 1, sentAt: 1, recipients: ['b'] });
    checker.receive({ recipient: 'b', sender: 'a', channel: 'message', seq: 1, at: 2 });
    checker.receive({ recipient: 'b', sender: 'a', channel: 'message', seq: 0, at: 3 });
    expect(checker.result()).toMatchObject({ reordered: 0, lost: 0, unconfirmed: 1 });
    // Once seq 0 is accepted too, the same arrivals are a reordering.
    checker.accept({ sender: 'a', kind: 'dm', seq: 0, sentAt: 0, recipients: ['b'] });
    expect(checker.result()).toMatchObject({ reordered: 1 });
  });

  it('counts a delivery that arrives before its sender heard `sent`, and fails a run where nothing was accepted', () => {
    const checker = new DeliveryChecker();
    checker.receive({ recipient: 'b', sender: 'a', channel: 'message', seq: 0, at: 2 });
    expect(checker.outstanding()).toBe(0);
    checker.accept({ sender: 'a', kind: 'dm', seq: 0, sentAt: 1, recipients: ['b'] });
    expect(checker.result()).toMatchObject({ lost: 0, delivered: 1, unconfirmed: 0 });
    expect(buildReport(new DeliveryChecker().result(), facts)).toMatchObject({
      ok: false,
      failures: ['no message was accepted'],
    });
  });

  it('computes nearest-rank percentiles', () => {
    const values = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentiles(values)).toEqual({ count: 100, p50: 50, p90: 90, p99: 99, max: 100 });
    expect(percentiles([])).toMatchObject({ count: 0 });
  });
});
