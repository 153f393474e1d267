/**
 * Issue 17: revocation stops everything the member owns, on every node. Two nodes with every HA flag on
 * (the contract harness's shared world: one Postgres, one Redis prefix): the member's sessions are on both
 * nodes, its watch is owned by the node it was created through, its schedules fire on whichever node
 * claims them; the operator revokes it through the *other* node's admin API.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ClientClosed } from '@mesh-broker/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CloseCode } from '../../protocol/errors.js';
import type { Frame, Message } from '../../protocol/frames.js';
import { useWorld } from '../contract/harness.js';
import { waitFor } from '../helpers/wait.js';

const hits: number[] = [];
/** The witness member's watch's polls (path /witness), kept apart from the revoked member's. */
const witnessHits: number[] = [];
let server: Server;
let base = '';

beforeAll(async () => {
  server = createServer((request, response) => {
    (request.url === '/witness' ? witnessHits : hits).push(Date.now());
    response.end(`version ${hits.length}`); // a new value at every poll: each would notify
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe('revocation across two nodes (every HA flag on)', () => {
  const world = useWorld('shared', {
    flag: 'ha.watches',
    env: { WATCH_ALLOW_PRIVATE: 'true', SCHEDULE_POLL_MS: '100' },
  });

  it('closes the member’s sessions on both nodes, stops its watch on the owner node and its schedules on every node', async () => {
    const mesh = await world.mesh(3);
    type Keys = (typeof mesh.members)[0];
    const [member, recipientKeys, witnessKeys] = mesh.members as [Keys, Keys, Keys];
    const onB = await world.peer(world.b, mesh, member);
    const onA = await world.peer(world.a, mesh, member);
    const recipient = await world.peer(world.a, mesh, recipientKeys);
    const got: Message[] = [];
    recipient.on('message', (m: Message) => got.push(m));
    const closed = (client: typeof onA) =>
      new Promise<ClientClosed>((resolve) => client.on('closed', (c: ClientClosed) => resolve(c)));
    const closedA = closed(onA);
    const closedB = closed(onB);

    const { watchId } = await onB.request<Frame & { watchId: string }>({
      type: 'watch.create',
      url: `${base}/feed`,
      mode: 'hash',
      intervalSec: 5,
    });
    // A witness member with the same watch (owned by B too) and a one-shot at the same time, made just
    // after the revoked member's: its poll and its delivery are the rounds in which the revoked member's
    // would have come (none may).
    const witness = await world.peer(world.b, mesh, witnessKeys);
    await witness.request({ type: 'watch.create', url: `${base}/witness`, mode: 'hash', intervalSec: 5 });
    const at = Date.now() + 3000;
    await witness.request({ type: 'schedule.create', to: recipientKeys.pubkey, body: 'witness', at });
    const schedules = [
      await onB.request<Frame & { scheduleId: string }>({
        type: 'schedule.create',
        to: recipientKeys.pubkey,
        body: 'dm after revocation',
        at,
      }),
      await onA.request<Frame & { scheduleId: string }>({
        type: 'schedule.create',
        to: '*',
        body: 'broadcast after revocation',
        at,
      }),
    ].map((s) => s.scheduleId);
    await waitFor(() => hits.length >= 1, { what: 'the watch’s first poll' });
    await waitFor(() => witnessHits.length >= 1, { what: 'the witness watch’s first poll' });
    const owner = await world.db.query<{ owner: string }>(
      'SELECT owner_node AS owner FROM watches WHERE id = $1',
      [watchId],
    );
    expect(owner.rows[0]!.owner).toBe(world.b.nodeId);

    // Revoked through node A: the watch's owner and one of the sessions are on B.
    const revoked = await world.a.admin(`/admin/meshes/${mesh.meshId}/members/${member.pubkey}/revoke`, {
      method: 'POST',
    });
    expect(revoked.status).toBe(200);
    const revokedAt = Date.now();
    expect(await closedA).toMatchObject({ code: CloseCode.memberRevoked });
    expect(await closedB).toMatchObject({ code: CloseCode.memberRevoked });

    // Past the schedules' time (polled every 100 ms on both nodes) and the watch's next poll, as the
    // witness's show: nothing of the revoked member's may fire or poll.
    await waitFor(() => got.some((m) => m.body === 'witness'), {
      timeoutMs: 10_000,
      what: 'the witness one-shot',
    });
    await waitFor(() => witnessHits.length >= 2, {
      timeoutMs: 10_000,
      what: 'the witness watch’s next poll',
    });
    expect(hits.filter((t) => t > revokedAt)).toEqual([]);
    expect(got.filter((m) => m.body !== 'witness')).toEqual([]);
    const occurrences = await world.db.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM schedule_occurrences WHERE schedule_id = ANY ($1::uuid[])',
      [schedules],
    );
    expect(occurrences.rows[0]!.n).toBe(0); // not even claimed and skipped: never due again
    const rows = await world.db.query<{ cancelled: boolean }>(
      'SELECT cancelled_at IS NOT NULL AS cancelled FROM schedules WHERE id = ANY ($1::uuid[])',
      [schedules],
    );
    expect(rows.rows.map((r) => r.cancelled)).toEqual([true, true]);
    const watch = await world.db.query<{ deleted: boolean }>(
      'SELECT deleted_at IS NOT NULL AS deleted FROM watches WHERE id = $1',
      [watchId],
    );
    expect(watch.rows[0]!.deleted).toBe(true);
  }, 40_000);
});
