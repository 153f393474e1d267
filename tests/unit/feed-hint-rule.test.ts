/**
 * The hint rule of a session's feed (issue 25, docs/design.md § 2.3): a hint over the bus is written only
 * once the feed's own read shows its row. The source here is the member's rows in memory, standing for
 * Postgres (the integration tests, tests/integration/bus-trust.test.ts, run it against the real one).
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { type FeedItem, type FeedSocket, type FeedSource, SessionFeed } from '../../broker/delivery/feed.js';
import type { DurableFrame } from '../../protocol/frames.js';
import { waitFor } from '../helpers/wait.js';

const frame = (id: number, body = `m${id}`): DurableFrame => ({
  type: 'message',
  messageId: String(id),
  sentAt: 'now',
  body,
});

/** The member's rows: `lastSeq` (every seq handed out) and which of them are still unacked. */
class Rows implements FeedSource {
  lastSeq = 0;
  readonly unacked = new Map<number, DurableFrame>();
  reads = 0;
  add(body?: string): FeedItem {
    const seq = ++this.lastSeq;
    this.unacked.set(seq, frame(seq, body));
    return { seq, frame: this.unacked.get(seq)! };
  }
  async read(_memberId: number, afterSeq: number, limit: number) {
    this.reads++;
    const items = [...this.unacked]
      .filter(([seq]) => seq > afterSeq)
      .slice(0, limit)
      .map(([seq, f]) => ({ seq, frame: f }));
    return { lastSeq: this.lastSeq, items };
  }
}

function socket(): FeedSocket & { written: unknown[] } {
  const written: unknown[] = [];
  return {
    written,
    isOpen: true,
    congested: false,
    whenDrained: async () => {},
    writeDurable: (f) => written.push(f.body),
  };
}

async function startedFeed(rows: Rows) {
  const out = socket();
  const counted: Record<string, number> = {};
  const feed = new SessionFeed(
    1,
    out,
    rows,
    (path, n) => {
      counted[path] = (counted[path] ?? 0) + n;
    },
    pino({ level: 'silent' }),
  );
  await feed.start();
  return { feed, out, counted };
}

describe('a hint over the bus', () => {
  it('that names no row is never written, and costs one read', async () => {
    const rows = new Rows();
    const { feed, out } = await startedFeed(rows);
    const before = rows.reads;
    feed.wake({ seq: 1, frame: frame(1, 'forged') }, 'remote');
    await waitFor(() => rows.reads === before + 1);
    const real = rows.add('real');
    feed.wake(real, 'remote');
    await waitFor(() => out.written.length === 1);
    expect(out.written).toEqual(['real']);
  });

  it('is written once the read shows its row, even when another session acked it meanwhile, in seq order', async () => {
    const rows = new Rows();
    const { feed, out, counted } = await startedFeed(rows);
    const one = rows.add();
    const two = rows.add();
    rows.unacked.delete(one.seq); // acked through another session of the member
    feed.wake(one, 'remote');
    await waitFor(() => out.written.length === 2);
    expect(out.written).toEqual(['m1', 'm2']);
    expect(counted).toEqual({ remote: 1, backlog: 1 });
    feed.wake(two, 'remote'); // already dealt with: nothing more
    expect(out.written).toEqual(['m1', 'm2']);
  });

  it('never replaces the row the read returns', async () => {
    const rows = new Rows();
    const { feed, out } = await startedFeed(rows);
    const row = rows.add('from postgres');
    feed.wake({ seq: row.seq, frame: frame(row.seq, 'from the hint') }, 'remote');
    await waitFor(() => out.written.length === 1);
    expect(out.written).toEqual(['from postgres']);
  });
});

/** Rows that can also prove a hint, as MessageStore.prove does: the unacked row at that seq is that message. */
class ProvingRows extends Rows {
  proofs = 0;
  async prove(_memberId: number, seq: number, messageId: string) {
    this.proofs++;
    return this.unacked.get(seq)?.messageId === messageId;
  }
}

describe('a hint over the bus, with proofs', () => {
  it('right after the cursor, proven: written without a read', async () => {
    const rows = new ProvingRows();
    const { feed, out, counted } = await startedFeed(rows);
    const reads = rows.reads;
    for (let i = 0; i < 3; i++) feed.wake(rows.add(), 'remote');
    await waitFor(() => out.written.length === 3);
    expect(out.written).toEqual(['m1', 'm2', 'm3']);
    expect(counted).toEqual({ remote: 3 });
    expect({ reads: rows.reads - reads, proofs: rows.proofs }).toEqual({ reads: 0, proofs: 3 });
  });

  it('naming another message at a real seq: not proven, and the read writes the row, never the hint', async () => {
    const rows = new ProvingRows();
    const { feed, out } = await startedFeed(rows);
    const row = rows.add('from postgres');
    feed.wake({ seq: row.seq, frame: { ...frame(99, 'forged'), messageId: '99' } }, 'remote');
    await waitFor(() => out.written.length === 1);
    expect(out.written).toEqual(['from postgres']);
    expect(rows.proofs).toBe(1);
  });

  it('acked by another session meanwhile: not proven, and the read shows it is owed (written once)', async () => {
    const rows = new ProvingRows();
    const { feed, out, counted } = await startedFeed(rows);
    const one = rows.add();
    rows.unacked.delete(one.seq);
    feed.wake(one, 'remote');
    await waitFor(() => out.written.length === 1);
    expect(out.written).toEqual(['m1']);
    expect(counted).toEqual({ remote: 1 });
    expect(rows.proofs).toBe(1);
  });

  it('beyond a gap: no proof, a read', async () => {
    const rows = new ProvingRows();
    const { feed, out } = await startedFeed(rows);
    rows.add();
    const two = rows.add();
    feed.wake(two, 'remote');
    await waitFor(() => out.written.length === 2);
    expect(out.written).toEqual(['m1', 'm2']);
    expect(rows.proofs).toBe(0);
  });
});
