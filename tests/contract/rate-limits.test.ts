/**
 * Contract of `RateLimits` (broker/rate-limits/rate-limits.ts), against LocalRateLimits (one node,
 * `ha.rate-limits` off) and SharedRateLimits (two nodes, on): `consume` takes a point from every window of
 * the kind's policy for the key, and is allowed only while every window still had one: `send` per member
 * (burst, then the per-minute rate: `rate_limited` with when to retry), `hook` per session (429 with
 * Retry-After); one bucket per key over every node of the cluster. Flipping the flag there and back twice:
 * each store keeps counting its own windows (a store the key had not used yet gives it its quota once,
 * as docs/design.md §3.2 says), and never more.
 */
import { randomUUID } from 'node:crypto';
import type { MeshClient } from '@mesh-broker/sdk';
import { describe, expect, it } from 'vitest';
import type { TestNode } from '../helpers/broker.js';
import { flipSequence, useWorld, WORLDS_WITH_REDIS_CLUSTER } from './harness.js';

// Burst 3, then 6 a minute: the burst window is 3 × 60 / 6 = 30 s, so nothing refills during a test.
const BURST = 3;
const HOOK_PER_MIN = 3;

/** `sent`, or the error code of a refused send (and its message). */
async function trySend(client: MeshClient, to: string): Promise<{ outcome: string; message?: string }> {
  try {
    await client.send(to, 'x', { id: randomUUID() });
    return { outcome: 'sent' };
  } catch (error) {
    const { code, message } = error as { code: string; message: string };
    return { outcome: code, message };
  }
}

async function hook(node: TestNode, sessionId: string, status: string) {
  const response = await fetch(`${node.url}/hook/status`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ sessionId, status }),
  });
  return { status: response.status, retryAfter: response.headers.get('retry-after') };
}

describe.each(WORLDS_WITH_REDIS_CLUSTER)('RateLimits contract, %s', (kind) => {
  const world = useWorld(kind, {
    flag: 'ha.rate-limits',
    env: { SEND_BURST: String(BURST), SEND_RATE_PER_MIN: '6', HOOK_RATE_PER_MIN: String(HOOK_PER_MIN) },
  });

  it('send: a member gets its burst over every node together, then rate_limited with when to retry; other members keep theirs', async () => {
    const mesh = await world.mesh(3);
    const [senderKeys, recipientKeys, otherKeys] = mesh.members;
    const onA = await world.peer(world.a, mesh, senderKeys!);
    const onB = await world.peer(world.b, mesh, senderKeys!);
    const other = await world.peer(world.b, mesh, otherKeys!);
    const to = recipientKeys!.pubkey;
    const outcomes = [await trySend(onA, to), await trySend(onB, to), await trySend(onA, to)];
    expect(outcomes.map((o) => o.outcome)).toEqual(['sent', 'sent', 'sent']);
    for (const session of [onB, onA]) {
      const refused = await trySend(session, to);
      expect(refused.outcome).toBe('rate_limited');
      const retryMs = Number(/retry in (\d+) ms/.exec(refused.message ?? '')?.[1]);
      expect(retryMs).toBeGreaterThan(0);
      expect(retryMs).toBeLessThanOrEqual(30_000);
    }
    // Another member's bucket is its own.
    for (let i = 0; i < BURST; i++) expect((await trySend(other, to)).outcome).toBe('sent');
    expect((await trySend(other, to)).outcome).toBe('rate_limited');
    expect(
      await world.metric(world.a, 'mesh_broker_rate_limited_total', { kind: 'send' }),
    ).toBeGreaterThanOrEqual(1);
  });

  it('hook: a session gets HOOK_RATE_PER_MIN status reports over every node together, then 429 with Retry-After; other sessions keep theirs', async () => {
    const mesh = await world.mesh(2);
    const subject = await world.peer(world.a, mesh, mesh.members[0]!);
    const other = await world.peer(world.b, mesh, mesh.members[1]!);
    const statuses = [
      await hook(world.a, subject.sessionId, 'one'),
      await hook(world.b, subject.sessionId, 'two'),
      await hook(world.a, subject.sessionId, 'three'),
    ];
    expect(statuses.map((s) => s.status)).toEqual([200, 200, 200]);
    for (const node of [world.b, world.a]) {
      const refused = await hook(node, subject.sessionId, 'four');
      expect(refused.status).toBe(429);
      expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    }
    expect((await hook(world.b, other.sessionId, 'mine')).status).toBe(200);
  });

  it('flips ha.rate-limits there and back twice: each store counts its windows (a store new to the key gives its quota once), never more', async () => {
    const mesh = await world.mesh(3);
    const [keptKeys, recipientKeys] = mesh.members;
    const to = recipientKeys!.pubkey;
    // One member sends through A the whole time; a fresh member after each flip.
    const kept = await world.peer(world.a, mesh, keptKeys!);
    const allowedUntilRefused = async (client: MeshClient) => {
      let allowed = 0;
      while (allowed <= BURST) {
        const { outcome } = await trySend(client, to);
        if (outcome === 'rate_limited') return allowed;
        if (outcome !== 'sent') throw new Error(`send: ${outcome}`);
        allowed++;
      }
      return allowed;
    };
    const perPhase = [await allowedUntilRefused(kept)];
    const fresh: number[] = [];
    for (const target of flipSequence(world)) {
      await world.flip(target);
      perPhase.push(await allowedUntilRefused(kept));
      // A member that never sent: its full burst, then refused, through either node while the
      // buckets are shared, through A at least.
      const newcomer = await world.mesh(2);
      const at = world.crossNode() ? [world.a, world.b] : [world.a];
      const sessions = await Promise.all(at.map((node) => world.peer(node, newcomer, newcomer.members[0]!)));
      let allowed = 0;
      for (let i = 0; allowed < BURST + 1 && i < 2 * BURST; i++) {
        const { outcome } = await trySend(sessions[i % sessions.length]!, newcomer.members[1]!.pubkey);
        if (outcome !== 'sent') break;
        allowed++;
      }
      fresh.push(allowed);
    }
    // The home store, then the other store once, then nothing more: both stores' windows are spent.
    expect(perPhase).toEqual([BURST, BURST, 0, 0, 0]);
    expect(fresh).toEqual([BURST, BURST, BURST, BURST]);
  });
});
