/**
 * Issue 30 item 5: revocation is a state, not an event. Two nodes with every HA flag on (one Postgres,
 * one Redis prefix), driven as a fault or an attacker would:
 * - a hello in flight when the revocation commits (held at its groups write by a row lock the
 *   revocation's own transaction holds) is never welcomed;
 * - a revocation whose bus message never came (written straight to Postgres: no admin call, no bus
 *   message) still closes the member's sockets on both nodes within a second;
 * - a revoked peer that ignores the close frame (it takes its TCP socket over from ws and keeps writing
 *   frames) gets nothing done: no stream data reaches a subscriber, no schedule is stored, and its socket
 *   is cut;
 * - the admin call says how many sessions it closed on which node.
 */
import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import type { ClientClosed, MeshClient } from '@mesh-broker/sdk';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../protocol/errors.js';
import { useWorld } from '../contract/harness.js';
import { helloFrame, rawSession } from '../helpers/hello.js';
import { RawSocket } from '../helpers/raw.js';
import { waitFor, within } from '../helpers/wait.js';

const closedOf = (client: MeshClient) =>
  new Promise<ClientClosed>((resolve) => client.on('closed', (c: ClientClosed) => resolve(c)));

/** A masked client text frame, written by hand (RFC 6455 §5.2): what ws would send, minus ws. */
function textFrame(payload: string): Buffer {
  const data = Buffer.from(payload);
  const mask = randomBytes(4);
  const head =
    data.length < 126
      ? Buffer.from([0x81, 0x80 | data.length])
      : Buffer.from([0x81, 0x80 | 126, data.length >> 8, data.length & 0xff]);
  const masked = Buffer.from(data.map((byte, i) => byte ^ mask[i % 4]!));
  return Buffer.concat([head, mask, masked]);
}

/**
 * Takes a welcomed raw socket's TCP stream away from ws: from now on nothing answers the node's close
 * frame (the node's ws waits 30 s for an answer before it destroys the socket), and `write` sends frames.
 */
function deaf(raw: RawSocket): { write: (frame: object) => void; ended: Promise<void> } {
  const tcp = (raw.socket as unknown as { _socket: Socket })._socket;
  tcp.removeAllListeners('data');
  tcp.removeAllListeners('end');
  tcp.on('data', () => {}); // read and dropped, close frame included
  tcp.on('error', () => {});
  const ended = new Promise<void>((resolve) => tcp.once('close', () => resolve()));
  return { write: (frame) => tcp.write(textFrame(JSON.stringify(frame))), ended };
}

describe('revocation as a state (two nodes, every HA flag on)', () => {
  const world = useWorld('shared', { flag: 'ha.presence', env: { SCHEDULE_POLL_MS: '100' } });

  it('a hello in flight when the revocation commits is closed 4403 and never welcomed', async () => {
    const mesh = await world.mesh(1);
    const member = mesh.members[0]!;
    const revoker = new pg.Client({ connectionString: world.db.url });
    await revoker.connect();
    try {
      // The revocation's transaction holds the member's row; the hello (asking for new groups) passes its
      // member check (the revocation is not committed) and waits at its groups write.
      await revoker.query('BEGIN');
      await revoker.query('UPDATE members SET revoked_at = now() WHERE pubkey = $1', [member.pubkey]);
      const raw = await RawSocket.open(world.b.wsUrl);
      raw.send(helloFrame(mesh, member, { groups: ['late'] }));
      await waitFor(
        async () => {
          const waiting = await world.db.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%groups%'`,
          );
          return waiting.rows[0]!.n > 0;
        },
        { what: 'the hello waiting at its groups write' },
      );
      await revoker.query('COMMIT');
      expect(await within(raw.closed, 5000, 'still open 5 s after the revocation')).toMatchObject({
        code: CloseCode.memberRevoked,
      });
      await expect(raw.next((f) => f.type === 'welcome', 0)).rejects.toThrow(/no matching frame/);
    } finally {
      await revoker.end();
    }
  }, 30_000);

  it('a revocation whose bus message never came closes the member’s sockets on both nodes within a second', async () => {
    const mesh = await world.mesh(1);
    const member = mesh.members[0]!;
    const onA = await world.peer(world.a, mesh, member);
    const onB = await world.peer(world.b, mesh, member);
    const closed = [closedOf(onA), closedOf(onB)];
    const started = Date.now();
    // Straight to Postgres: what the nodes see when the admin's bus message is lost.
    await world.db.query('UPDATE members SET revoked_at = now() WHERE pubkey = $1', [member.pubkey]);
    const outcomes = await Promise.all(
      closed.map((c) =>
        within(
          c.then((o) => ({ ...o, at: Date.now() })),
          5000,
          'still open 5 s after the revocation',
        ),
      ),
    );
    for (const outcome of outcomes) expect(outcome).toMatchObject({ code: CloseCode.memberRevoked });
    // REVOCATION_RECHECK_MS is 500 by default; a second is the bound the issue asks for (plus scheduling
    // slack on a shared machine).
    const at = outcomes.map((o) => (typeof o === 'string' ? Number.POSITIVE_INFINITY : o.at));
    expect(Math.max(...at) - started).toBeLessThan(1500);
  }, 30_000);

  it('a revoked peer that ignores the close gets no frame handled and is cut off', async () => {
    const mesh = await world.mesh(2);
    const [member, witnessKeys] = mesh.members as [(typeof mesh.members)[0], (typeof mesh.members)[0]];
    const witness = await rawSession(world.b.wsUrl, helloFrame(mesh, witnessKeys));
    const seen: unknown[] = [];
    witness.socket.on('message', (data) => {
      const frame = JSON.parse(data.toString()) as { type: string; data?: unknown };
      if (frame.type === 'stream.data') seen.push(frame.data);
    });
    witness.send({ type: 'stream.subscribe', stream: 'feed', rid: 's' });
    await witness.next((f) => f.type === 'stream.subscribed');
    const raw = await rawSession(world.a.wsUrl, helloFrame(mesh, member));
    // Before the revocation the member's publishes reach the witness: the check below can fail.
    raw.send({ type: 'stream.publish', stream: 'feed', data: 'before' });
    await waitFor(() => seen.includes('before'), { what: 'the publish before the revocation' });
    const attacker = deaf(raw);

    const revoked = await world.a.admin(`/admin/meshes/${mesh.meshId}/members/${member.pubkey}/revoke`, {
      method: 'POST',
    });
    expect(revoked.status).toBe(200);
    const revokedAt = Date.now();
    for (let i = 0; i < 20; i++) {
      attacker.write({ type: 'stream.publish', stream: 'feed', data: `after ${i}` });
      attacker.write({
        type: 'schedule.create',
        to: witnessKeys.pubkey,
        body: `late ${i}`,
        at: Date.now() + 60_000,
      });
    }
    let cut = false;
    void attacker.ended.then(() => {
      cut = true;
    });
    await waitFor(() => cut || seen.length > 1, {
      timeoutMs: 10_000,
      what: 'the socket cut, or a frame served',
    });
    expect(seen).toEqual(['before']);
    expect(cut).toBe(true);
    expect(Date.now() - revokedAt).toBeLessThan(3000);
    const schedules = await world.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM schedules s JOIN members m ON m.id = s.member_id WHERE m.pubkey = $1`,
      [member.pubkey],
    );
    expect(schedules.rows[0]!.n).toBe(0);
  }, 30_000);

  it('the admin call reports the sessions it closed, per node', async () => {
    const mesh = await world.mesh(1);
    const member = mesh.members[0]!;
    const peers = [
      await world.peer(world.a, mesh, member),
      await world.peer(world.b, mesh, member),
      await world.peer(world.b, mesh, member),
    ];
    const closed = peers.map(closedOf);
    const response = await world.a.admin(`/admin/meshes/${mesh.meshId}/members/${member.pubkey}/revoke`, {
      method: 'POST',
    });
    expect(response.status).toBe(200);
    const body = (await response.json()) as {
      revokedAt: string;
      sessionsClosed: {
        total: number;
        nodes: Array<{ node: string; sessions: number }>;
        unconfirmed: string[];
      };
    };
    expect(body.revokedAt).not.toBeNull();
    expect(body.sessionsClosed.total).toBe(3);
    expect([...body.sessionsClosed.nodes].sort((x, y) => x.node.localeCompare(y.node))).toEqual(
      [
        { node: world.a.nodeId, sessions: 1 },
        { node: world.b.nodeId, sessions: 2 },
      ].sort((x, y) => x.node.localeCompare(y.node)),
    );
    expect(body.sessionsClosed.unconfirmed).toEqual([]);
    for (const outcome of await Promise.all(closed)) expect(outcome.code).toBe(CloseCode.memberRevoked);
    // A second call closes nothing more and says so.
    const again = await world.a.admin(`/admin/meshes/${mesh.meshId}/members/${member.pubkey}/revoke`, {
      method: 'POST',
    });
    expect(((await again.json()) as typeof body).sessionsClosed).toEqual({
      total: 0,
      nodes: [],
      unconfirmed: [],
    });
  }, 30_000);
});
