/**
 * Issue 17, items 6 and 8 (second half), driven the way an attacker would, over real WebSockets against
 * a real node (one node, every HA flag off; the contract suite runs the same attacks on both presence
 * implementations):
 * - session-id squatting: a member says hello with another member's session id once that session's
 *   grace period is over (the id is in every `peers.list` and `peer.joined` of the mesh);
 * - the SDK tells a permanent refusal from a transient one, and keeps retrying on the transient ones;
 * - hellos from outside the mesh cost a signature check and a lookup, never a stored nonce.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type Server, Socket } from 'node:net';
import { generateMemberKeys, MeshClient, MeshClosedError } from '@mesh-broker/sdk';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { createPool, type Pool } from '../../broker/db/pool.js';
import { SessionBindings } from '../../broker/presence/session-bindings.js';
import { helloFrame, rawSession } from '../helpers/hello.js';
import { closeAllClients, connectPeer, createMesh, type TestMesh } from '../helpers/mesh.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { freePort } from '../helpers/ports.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { RawSocket } from '../helpers/raw.js';
import { waitFor } from '../helpers/wait.js';

const GRACE_MS = 300;
const REDIS_PREFIX = `wbtest:abuse-sessions:${randomBytes(4).toString('hex')}:`;
let db: TestDatabase;
let node: InProcessNode;
let mesh: TestMesh;
let redis: Redis;
const extraNodes: InProcessNode[] = [];

beforeAll(async () => {
  db = await createTestDatabase('abuse_sessions');
  node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: {
      PRESENCE_GRACE_MS: String(GRACE_MS),
      REDIS_KEY_PREFIX: REDIS_PREFIX,
    },
  });
  mesh = await createMesh(node, 3);
  redis = new Redis('redis://127.0.0.1:6379', { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect();
});
afterEach(closeAllClients);
afterAll(async () => {
  for (const extra of extraNodes) await extra.stop().catch(() => {});
  await node?.stop();
  await redis?.quit();
  await db?.drop();
});

/** The close that refused a hello, or `{code: 0, reason: 'welcomed'}` when the node accepted it. */
async function helloRejection(wsUrl: string, hello: object): Promise<{ code: number; reason: string }> {
  const socket = await RawSocket.open(wsUrl);
  socket.send(hello);
  const welcomed = socket
    .next((frame) => frame.type === 'welcome', 10_000)
    .then(
      () => ({ code: 0, reason: 'welcomed' }),
      () => new Promise<never>(() => {}), // closed first: the close is the answer
    );
  const outcome = await Promise.race([socket.closed, welcomed]);
  socket.close();
  return outcome;
}

/** Resolves once the session's presence row is gone: its grace period is over, nothing holds it. */
async function graceOver(sessionId: string): Promise<void> {
  await waitFor(
    async () => (await db.query('SELECT 1 FROM presence WHERE session_id = $1', [sessionId])).rowCount === 0,
    { timeoutMs: GRACE_MS + 5000, what: `the presence row of ${sessionId} to go` },
  );
}

/**
 * A TCP relay to the node that can be cut (every connection dropped, new ones refused) and restored:
 * an SDK behind it loses its network for as long as the test wants, as a laptop that sleeps does.
 */
class CuttableRelay {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();

  private constructor(
    readonly port: number,
    private readonly targetPort: number,
  ) {}

  static async start(targetPort: number): Promise<CuttableRelay> {
    const relay = new CuttableRelay(await freePort(), targetPort);
    await relay.restore();
    return relay;
  }

  get wsUrl(): string {
    return `ws://127.0.0.1:${this.port}/ws`;
  }

  async restore(): Promise<void> {
    const server = createServer((inbound) => {
      const outbound = new Socket();
      this.sockets.add(inbound).add(outbound);
      const drop = () => {
        inbound.destroy();
        outbound.destroy();
        this.sockets.delete(inbound);
        this.sockets.delete(outbound);
      };
      inbound.on('error', drop).on('close', drop);
      outbound.on('error', drop).on('close', drop);
      outbound.connect(this.targetPort, '127.0.0.1', () => {
        inbound.pipe(outbound);
        outbound.pipe(inbound);
      });
    });
    this.server = server;
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', resolve));
  }

  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

describe('a session id stays bound to its member (issue 17, item 6)', () => {
  it("after the owner's grace period another member's hello with the session id is refused, and the owner's SDK, back from a long absence, resumes its session instead of getting 4401", async () => {
    const [ownerKeys, squatterKeys, observerKeys] = mesh.members;
    const observer = await connectPeer(node.wsUrl, mesh, observerKeys!);
    const relay = await CuttableRelay.start(Number(new URL(node.url).port));
    const owner = await connectPeer(relay.wsUrl, mesh, ownerKeys!, {
      backoff: { initialMs: 50, maxMs: 200 },
    });
    const ownerClosed: unknown[] = [];
    const ownerRefusals: unknown[] = [];
    owner.on('closed', (event) => ownerClosed.push(event));
    owner.on('disconnected', (event) => {
      if (event.code !== 1006) ownerRefusals.push(event);
    });
    // The attacker learns the id as every member of the mesh does.
    expect((await observer.peers()).map((p) => p.sessionId)).toContain(owner.sessionId);

    await relay.cut();
    await graceOver(owner.sessionId);
    const squat = await helloRejection(
      node.wsUrl,
      helloFrame(mesh, squatterKeys!, { sessionId: owner.sessionId }),
    );
    expect(squat).toEqual({ code: 4401, reason: 'session belongs to another member' });
    // And again later, from a fresh socket, with a fresh nonce: the id is not up for grabs.
    const again = await helloRejection(
      node.wsUrl,
      helloFrame(mesh, squatterKeys!, { sessionId: owner.sessionId.toUpperCase() }),
    );
    expect(again.code).toBe(4401);

    const back = owner.next('welcome', () => true, 10_000);
    await relay.restore();
    expect(await back).toMatchObject({ sessionId: owner.sessionId, resumed: false });
    expect(owner.connected).toBe(true);
    expect((await owner.request({ type: 'ping' })).type).toBe('pong');
    expect(ownerRefusals).toEqual([]);
    expect(ownerClosed).toEqual([]);
    await relay.cut();
  });

  it('the binding outlives the node: after a restart, a squatter is still refused', async () => {
    const [ownerKeys, squatterKeys] = mesh.members;
    const first = await startNode({
      kind: 'in-process',
      databaseUrl: db.url,
      env: { PRESENCE_GRACE_MS: String(GRACE_MS) },
    });
    extraNodes.push(first);
    const sessionId = randomUUID();
    const owner = await rawSession(first.wsUrl, helloFrame(mesh, ownerKeys!, { sessionId }));
    owner.close();
    await owner.closed;
    await first.stop(); // a local node clears its presence rows as it stops
    await graceOver(sessionId);
    const second = await startNode({
      kind: 'in-process',
      databaseUrl: db.url,
      env: { PRESENCE_GRACE_MS: String(GRACE_MS) },
    });
    extraNodes.push(second);
    expect(await helloRejection(second.wsUrl, helloFrame(mesh, squatterKeys!, { sessionId }))).toEqual({
      code: 4401,
      reason: 'session belongs to another member',
    });
    const resumed = await rawSession(second.wsUrl, helloFrame(mesh, ownerKeys!, { sessionId }));
    resumed.close();
  });

  it("a member's bindings are bounded: past the bound its least recently used ids go (never one with a presence row), another member's never", async () => {
    const pool: Pool = createPool(db.url, { max: 2 });
    try {
      const bounded = new SessionBindings(pool, 3);
      const own = await createMesh(node, 2);
      const ids = await db.query<{ id: number; pubkey: string }>(
        'SELECT id, pubkey FROM members WHERE mesh_id = $1 ORDER BY id',
        [own.meshId],
      );
      const [alice, bob] = ids.rows.map((r) => Number(r.id));
      const bobs = randomUUID();
      expect(await bounded.bind(bobs, bob!)).toBe(true);
      // Alice's oldest id is connected (a presence row): it stays whatever she does.
      const connected = await rawSession(node.wsUrl, helloFrame(own, own.members[0]!));
      const connectedId = String(
        (await db.query('SELECT session_id FROM presence WHERE member_id = $1', [alice])).rows[0]!.session_id,
      );
      // The order of the binds is what is tested: each bind is its own statement, so Postgres's now()
      // (microseconds) stamps each later than the one before; checked bind by bind, since the test rests on it.
      const made: string[] = [];
      let previous = '';
      for (let i = 0; i < 6; i++) {
        const id = randomUUID();
        expect(await bounded.bind(id, alice!)).toBe(true);
        made.push(id);
        const stamp = await db.query<{ at: string }>(
          "SELECT to_char(last_hello_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') AS at FROM session_bindings WHERE session_id = $1",
          [id],
        );
        expect(stamp.rows[0]!.at > previous).toBe(true);
        previous = stamp.rows[0]!.at;
      }
      const kept = await db.query<{ session_id: string }>(
        'SELECT session_id FROM session_bindings WHERE member_id = $1',
        [alice],
      );
      expect(kept.rows.map((r) => r.session_id).sort()).toEqual([connectedId, ...made.slice(-3)].sort());
      // A refused bind writes nothing and evicts nothing.
      expect(await bounded.bind(bobs, alice!)).toBe(false);
      expect(await bounded.ownerOf(bobs)).toBe(bob);
      // An id given up by its own member's churn can be bound again (by that member or another).
      expect(await bounded.bind(made[0]!, alice!)).toBe(true);
      connected.close();
    } finally {
      await pool.end();
    }
  });
});

describe('the SDK tells a permanent refusal from a transient one', () => {
  it('an unknown key is refused for good: connect() rejects with permanent: true, closed says so, no retry', async () => {
    const stranger = new MeshClient({
      urls: [node.wsUrl],
      meshId: mesh.meshId,
      keys: generateMemberKeys(),
      backoff: { initialMs: 20, maxMs: 50 },
    });
    const reconnects: unknown[] = [];
    stranger.on('reconnecting', (event) => reconnects.push(event));
    const closed = stranger.next('closed');
    const refused = await stranger.connect().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(MeshClosedError);
    expect((refused as MeshClosedError).permanent).toBe(true);
    expect(await closed).toEqual({ code: 4401, reason: 'unknown member', permanent: true });
    expect(stranger.closedBy).toEqual({ code: 4401, reason: 'unknown member', permanent: true });
    // Many backoffs (20 to 50 ms) later, measured by a witness client: a refused client must not reconnect.
    await fiveBackoffsLater({ initialMs: 20, maxMs: 50 });
    expect(reconnects).toEqual([]);
  });

  it('a client refused with 4408 (mesh at capacity) is told permanent: false, keeps retrying with backoff, and gets in once there is room', async () => {
    const capped = await startNode({
      kind: 'in-process',
      databaseUrl: db.url,
      env: {
        PRESENCE_GRACE_MS: String(GRACE_MS),
        MESH_CONNECTION_CAP: '1',
      },
    });
    extraNodes.push(capped);
    const small = await createMesh(capped, 2);
    const holder = await connectPeer(capped.wsUrl, small, small.members[0]!);
    const waiting = new MeshClient({
      urls: [capped.wsUrl],
      meshId: small.meshId,
      keys: small.members[1]!,
      backoff: { initialMs: 20, maxMs: 100 },
    });
    const refusals: Array<{ code: number; permanent: boolean; willReconnect: boolean }> = [];
    waiting.on('disconnected', (event) => refusals.push(event));
    const welcomed = waiting.connect();
    await waitFor(() => refusals.length >= 3, { what: 'three 4408 refusals', timeoutMs: 8000 });
    expect(refusals.slice(0, 3)).toEqual(
      Array(3).fill({ code: 4408, reason: 'mesh at capacity', willReconnect: true, permanent: false }),
    );
    holder.close();
    expect((await welcomed).sessionId).toBe(waiting.sessionId);
    expect(waiting.closedBy).toBeUndefined();
    waiting.close();
    expect(waiting.closedBy).toEqual({ code: 1000, reason: 'client closed', permanent: false });
  });

  /**
   * A stand-in broker that closes every socket with one code, and an SDK client against it with `backoff`:
   * what the SDK does with each close code. `stop()` closes both.
   */
  async function standIn(code: number, reason: string, backoff: { initialMs: number; maxMs: number }) {
    const port = await freePort();
    const server = new WebSocketServer({ port, host: '127.0.0.1' });
    await new Promise<void>((resolve) => server.once('listening', () => resolve()));
    const counts = { sockets: 0 };
    server.on('connection', (socket) => {
      counts.sockets++;
      socket.once('message', () => socket.close(code, reason));
    });
    const client = new MeshClient({
      urls: [`ws://127.0.0.1:${port}/ws`],
      meshId: mesh.meshId,
      keys: mesh.members[0]!,
      backoff,
    });
    const events: Array<{ permanent: boolean; willReconnect: boolean }> = [];
    client.on('disconnected', (event) => events.push(event));
    client.connect().catch(() => {});
    const stop = async () => {
      client.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    };
    return { counts, events, client, stop };
  }

  /**
   * A witness for "no reconnect within many backoffs": a client with the same backoff against a stand-in
   * that closes with a transient code, started after the subject was refused; once it has reconnected
   * five times, five backoffs have passed for the subject too (no event says "did not reconnect").
   */
  async function fiveBackoffsLater(backoff: { initialMs: number; maxMs: number }): Promise<void> {
    const witness = await standIn(1011, 'internal error, retry', backoff);
    try {
      await waitFor(() => witness.counts.sockets >= 6, { what: 'five reconnects of the witness client' });
    } finally {
      await witness.stop();
    }
  }

  /** The SDK against a stand-in closing with `code`: retried (transient) or not (permanent). */
  async function sdkAgainst(code: number, reason: string, { retried }: { retried: boolean }) {
    const backoff = { initialMs: 10, maxMs: 30 };
    const subject = await standIn(code, reason, backoff);
    if (retried) {
      await waitFor(() => subject.counts.sockets >= 3 && subject.events.length >= 2, {
        what: 'three sockets and two reconnects',
      });
    } else {
      await waitFor(() => subject.events.length >= 1, { what: 'the refusal' });
      await fiveBackoffsLater(backoff);
    }
    const outcome = {
      sockets: subject.counts.sockets,
      events: subject.events,
      closedBy: subject.client.closedBy,
    };
    await subject.stop();
    return outcome;
  }

  it.each([
    [1001, 'node draining'],
    [1011, 'internal error, retry'],
    [4408, 'mesh at capacity'],
    [4429, 'too many sockets without a hello from this address'],
    [4401, 'no hello in time'],
  ])(
    'a transient close (%i %s) is retried with backoff: permanent: false, never closed',
    async (code, reason) => {
      const { sockets, events, closedBy } = await sdkAgainst(code, reason, { retried: true });
      expect(sockets).toBeGreaterThanOrEqual(3);
      expect(events.length).toBeGreaterThanOrEqual(2);
      expect(events.every((e) => e.permanent === false && e.willReconnect === true)).toBe(true);
      expect(closedBy).toBeUndefined();
    },
  );

  it.each([
    [4400, 'too many bad frames'],
    [4401, 'bad signature'],
    [4401, 'session belongs to another member'],
    [4403, 'member revoked'],
    [4409, 'session replaced by a newer connection'],
  ])('a permanent close (%i %s) stops the client at once with permanent: true', async (code, reason) => {
    const { sockets, events, closedBy } = await sdkAgainst(code, reason, { retried: false });
    expect(sockets).toBe(1);
    expect(events).toEqual([{ code, reason, willReconnect: false, permanent: true }]);
    expect(closedBy).toEqual({ code, reason, permanent: true });
  });
});

describe('refusing a non-member costs no storage (issue 17, item 8)', () => {
  it('hellos from outside the mesh (unknown key, unknown mesh, revoked member, forged signature), each with a fresh nonce, are refused and store no nonce: none in Redis, and each is still free for a member', async () => {
    const revokedMesh = await createMesh(node, 2);
    const revokedKeys = revokedMesh.members[1]!;
    const revoke = await node.admin(
      `/admin/meshes/${revokedMesh.meshId}/members/${revokedKeys.pubkey}/revoke`,
      { method: 'POST' },
    );
    expect(revoke.status).toBe(200);
    const nonKeysBefore = await redis.keys(`${REDIS_PREFIX}nonce:*`);
    const attempts: Array<{ kind: string; hello: ReturnType<typeof helloFrame> }> = [];
    for (let i = 0; i < 15; i++) {
      attempts.push({ kind: 'unknown key', hello: helloFrame(mesh, generateMemberKeys()) });
      attempts.push({
        kind: 'unknown mesh',
        hello: helloFrame({ ...mesh, meshId: randomUUID() }, mesh.members[0]!),
      });
      attempts.push({ kind: 'revoked', hello: helloFrame(revokedMesh, revokedKeys) });
      const forged = helloFrame(mesh, mesh.members[0]!);
      attempts.push({
        kind: 'forged',
        hello: { ...forged, sig: forged.sig.replace(/^./, (c) => (c === '0' ? '1' : '0')) },
      });
    }
    const expected: Record<string, { code: number; reason: string }> = {
      'unknown key': { code: 4401, reason: 'unknown member' },
      'unknown mesh': { code: 4401, reason: 'unknown member' },
      revoked: { code: 4403, reason: 'member revoked' },
      forged: { code: 4401, reason: 'bad signature' },
    };
    const outcomes = await Promise.all(
      attempts.map(async ({ kind, hello }) => ({ kind, closed: await helloRejection(node.wsUrl, hello) })),
    );
    for (const { kind, closed } of outcomes)
      expect({ kind, closed }).toEqual({ kind, closed: expected[kind] });
    expect(await redis.keys(`${REDIS_PREFIX}nonce:*`)).toEqual(nonKeysBefore);
    // The memory store: had any of those nonces been remembered, a member's hello with it would be
    // refused as a replay. Every one of them is still free.
    for (const { kind, hello } of attempts.filter((_, i) => i % 4 !== 3).slice(0, 12)) {
      const reused = helloFrame(mesh, mesh.members[2]!, { nonce: hello.nonce });
      expect({ kind, outcome: await helloRejection(node.wsUrl, reused) }).toEqual({
        kind,
        outcome: { code: 0, reason: 'welcomed' },
      });
    }
  });
});
