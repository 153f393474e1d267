import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool, type Pool } from '../../broker/db/pool.js';
import type { Delivery } from '../../broker/delivery/delivery.js';
import type { AcceptedMessage, Sender } from '../../broker/delivery/records.js';
import { type SendOrigin, type SendPathDeps, sendMessage } from '../../broker/delivery/send-path.js';
import { MessageStore } from '../../broker/delivery/store.js';
import { BrokerMetrics } from '../../broker/metrics.js';
import { LocalRateLimits } from '../../broker/rate-limits/rate-limits.local.js';
import { ProtocolError } from '../../protocol/errors.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { seriesValue } from '../helpers/verifier.js';

/**
 * The shared send path (broker/delivery/send-path.ts) against a real MessageStore in Postgres and real
 * in-memory rate limits: each outcome a peer's send, a schedule's occurrence and a watch's notification
 * share. The Delivery records its dispatches: what this path owns is whether and when it dispatches; the
 * wake of real sockets is covered by the callers' tests (messaging, schedules, watches).
 */
let db: TestDatabase;
let pool: Pool;

beforeAll(async () => {
  db = await createTestDatabase('send_path');
  pool = createPool(db.url, { max: 2 });
});
afterAll(async () => {
  await pool?.end();
  await db?.drop();
});

class RecordingDelivery implements Delivery {
  readonly dispatched: Array<{ meshId: string; messageId: string }> = [];
  async activate(): Promise<void> {}
  async deactivate(): Promise<void> {}
  async close(): Promise<void> {}
  dispatch(meshId: string, accepted: AcceptedMessage): void {
    this.dispatched.push({ meshId, messageId: accepted.frame.messageId });
  }
}

interface Setup {
  deps: SendPathDeps & { delivery: RecordingDelivery; metrics: BrokerMetrics };
  meshId: string;
  a: Sender;
  b: { pubkey: string };
}

/** A mesh with members a and b, and a send limit of `sendPoints` per minute. */
async function setup(sendPoints: number, backlogMax = 100): Promise<Setup> {
  const mesh = await db.query<{ id: string }>('INSERT INTO meshes (name) VALUES ($1) RETURNING id', [
    `send-path-${randomBytes(4).toString('hex')}`,
  ]);
  const meshId = mesh.rows[0]!.id;
  const member = async () => {
    const pubkey = randomBytes(32).toString('hex');
    const row = await db.query<{ id: number }>(
      'INSERT INTO members (mesh_id, pubkey) VALUES ($1, $2) RETURNING id',
      [meshId, pubkey],
    );
    return { memberId: Number(row.rows[0]!.id), pubkey };
  };
  const a = { meshId, sessionId: randomUUID(), ...(await member()) };
  const b = await member();
  const limits = new LocalRateLimits({
    send: [{ points: sendPoints, durationSec: 60 }],
    hook: [{ points: 100, durationSec: 60 }],
  });
  const deps = {
    messages: new MessageStore(pool, { backlogMax }),
    delivery: new RecordingDelivery(),
    limits,
    metrics: new BrokerMetrics('send-path-test'),
  };
  return { deps, meshId, a, b };
}

async function series(metrics: BrokerMetrics, name: string, labels: Record<string, string> = {}) {
  return seriesValue(await metrics.registry.metrics(), name, labels);
}

describe('the send path', () => {
  it('takes a token, accepts durably, then dispatches once; a retried id is a duplicate not dispatched again', async () => {
    const { deps, meshId, a, b } = await setup(10);
    const request = { origin: 'send' as const, sender: a, message: { id: 'm1', to: b.pubkey, body: 'hi' } };
    const first = await sendMessage(deps, request);
    if (first.limited) throw new Error('limited');
    const accepted = await first.accepted;
    expect(accepted.duplicate).toBe(false);
    expect(deps.delivery.dispatched).toEqual([{ meshId, messageId: accepted.frame.messageId }]);
    const stored = await db.query(`SELECT 1 FROM messages WHERE id || '-' || tag = $1`, [
      accepted.frame.messageId,
    ]);
    expect(stored.rowCount).toBe(1);

    const retry = await sendMessage(deps, request);
    if (retry.limited) throw new Error('limited');
    const again = await retry.accepted;
    expect(again.duplicate).toBe(true);
    expect(again.frame.messageId).toBe(accepted.frame.messageId);
    expect(deps.delivery.dispatched).toHaveLength(1);
    expect(await series(deps.metrics, 'mesh_broker_messages_accepted_total')).toBe(1);
  });

  it.each<SendOrigin>(['send', 'schedule', 'watch'])(
    'with the send limit spent (%s) stores nothing and counts under its origin',
    async (origin) => {
      const { deps, meshId, a, b } = await setup(1);
      const message = (id: string) => ({ id, to: b.pubkey, body: 'x' });
      const allowed = await sendMessage(deps, { origin, sender: a, message: message('ok') });
      if (allowed.limited) throw new Error('limited');
      await allowed.accepted;
      const refused = await sendMessage(deps, { origin, sender: a, message: message('over') });
      expect(refused.limited).toBe(true);
      if (refused.limited) expect(refused.retryAfterMs).toBeGreaterThan(0);
      const stored = await db.query('SELECT 1 FROM messages WHERE mesh_id = $1 AND client_id = $2', [
        meshId,
        'over',
      ]);
      expect(stored.rowCount).toBe(0);
      expect(deps.delivery.dispatched).toHaveLength(1);
      expect(await series(deps.metrics, 'mesh_broker_rate_limited_total', { kind: origin })).toBe(1);
      // Only a peer's `send` is a `sent` reply.
      expect(await series(deps.metrics, 'mesh_broker_messages_accepted_total')).toBe(
        origin === 'send' ? 1 : 0,
      );
    },
  );

  it('passes the store refusals on (not_found, a full backlog) without dispatching; a peer counts the backlog one', async () => {
    const { deps, a, b } = await setup(10, 1);
    const unknown = await sendMessage(deps, {
      origin: 'schedule',
      sender: a,
      message: { id: 'nobody', to: randomBytes(32).toString('hex'), body: 'x' },
    });
    if (unknown.limited) throw new Error('limited');
    await expect(unknown.accepted).rejects.toMatchObject({ code: 'not_found' });

    const fill = await sendMessage(deps, {
      origin: 'send',
      sender: a,
      message: { id: 'f', to: b.pubkey, body: 'x' },
    });
    if (fill.limited) throw new Error('limited');
    await fill.accepted;
    const over = await sendMessage(deps, {
      origin: 'send',
      sender: a,
      message: { id: 'o', to: b.pubkey, body: 'x' },
    });
    if (over.limited) throw new Error('limited');
    const error = await over.accepted.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProtocolError);
    expect((error as ProtocolError).code).toBe('limit_exceeded');
    expect(deps.delivery.dispatched).toHaveLength(1);
    expect(await series(deps.metrics, 'mesh_broker_backlog_refused_total', { kind: 'dm' })).toBe(1);
  });
});
