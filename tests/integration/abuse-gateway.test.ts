/**
 * The gateway's bounds, driven as an attacker would over real sockets: input nested too deep, sockets
 * that never say hello, and a sender that floods one socket with frames. Each case also checks that a
 * good peer on the same node keeps being served.
 */
import { Writable } from 'node:stream';
import type { MeshClient } from '@mesh-broker/sdk';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { helloFrame, rawSession } from '../helpers/hello.js';
import { closeAllClients, connectPeer, createMesh, type TestMesh } from '../helpers/mesh.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { RawSocket } from '../helpers/raw.js';
import { waitFor, within } from '../helpers/wait.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('abuse_gateway');
});
afterEach(closeAllClients);
afterAll(async () => {
  await db?.drop();
});

/** A logger whose lines a test can read back. */
function capturedLog() {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  return { log: pino({ level: 'info' }, sink), lines };
}

/** A DM from one good peer to another arrives: the node still serves the mesh. */
async function goodPeersServed(node: InProcessNode, mesh: TestMesh, from: number, to: number) {
  const sender = await connectPeer(node.wsUrl, mesh, mesh.members[from]!);
  const receiver = await connectPeer(node.wsUrl, mesh, mesh.members[to]!);
  const got = receiver.next('message');
  await sender.send(mesh.members[to]!.pubkey, 'still served');
  expect((await got).body).toBe('still served');
}

function nested(depth: number): string {
  return `${'['.repeat(depth)}${']'.repeat(depth)}`;
}

describe('input nested deeper than any frame needs', () => {
  let node: InProcessNode;
  let mesh: TestMesh;
  const captured = capturedLog();
  beforeAll(async () => {
    node = await startNode({ kind: 'in-process', databaseUrl: db.url, env: {}, log: captured.log });
    mesh = await createMesh(node, 3);
  });
  afterAll(() => node?.stop());

  it.each([
    ['a hello', (deep: string) => `{"type":"hello","v":1,"x":${deep}}`],
    ['a send before hello', (deep: string) => `{"type":"send","id":"a","to":"*","body":"b","x":${deep}}`],
  ])('30,000 levels within 64 KiB in %s: bad_request, logged at info without a stack', async (_, frame) => {
    const text = frame(nested(30_000));
    expect(text.length).toBeLessThan(64 * 1024);
    const socket = await RawSocket.open(node.wsUrl);
    socket.send(text);
    const error = await socket.next((f) => f.type === 'error');
    expect(error).toMatchObject({ code: 'bad_request', message: 'JSON nested deeper than 64 levels' });
    socket.close();
  });

  it('after hello too, with escapes in the text; the socket stays usable', async () => {
    const socket = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[0]!));
    socket.send(`{"type":"send","id":"a","to":"*","body":"\\u0041","rid":"r1","x":${nested(30_000)}}`);
    expect(await socket.next((f) => f.type === 'error')).toMatchObject({ code: 'bad_request' });
    socket.send({ type: 'ping', rid: 'p' });
    expect(await socket.next((f) => f.type === 'pong')).toMatchObject({ rid: 'p' });
    socket.close();
    await goodPeersServed(node, mesh, 1, 2);
    const errors = captured.lines.filter((line) => (line.level as number) >= 50);
    expect(errors).toEqual([]);
    const badFrames = captured.lines.filter((line) => line.msg === 'bad frame');
    expect(badFrames.length).toBeGreaterThanOrEqual(3);
    for (const line of badFrames) {
      expect(line.level).toBe(30); // info
      expect(JSON.stringify(line)).not.toContain('stack');
    }
  });

  it('64 levels are still accepted', async () => {
    const socket = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[0]!));
    socket.send(`{"type":"ping","rid":"deep","x":${nested(63)}}`);
    expect(await socket.next((f) => f.type === 'pong')).toMatchObject({ rid: 'deep' });
    socket.close();
  });
});

describe('sockets that never say hello', () => {
  let node: InProcessNode;
  let mesh: TestMesh;
  beforeAll(async () => {
    node = await startNode({
      kind: 'in-process',
      databaseUrl: db.url,
      env: { HELLO_PENDING_PER_ADDRESS: '4' },
    });
    mesh = await createMesh(node, 2);
  });
  afterAll(() => node?.stop());

  it('hold at most HELLO_PENDING_PER_ADDRESS slots of one address; one more is closed with 4429', async () => {
    const idle = await Promise.all([1, 2, 3, 4].map(() => RawSocket.open(node.wsUrl)));
    const extra = await RawSocket.open(node.wsUrl);
    expect(await extra.closed).toMatchObject({ code: 4429 });
    // A slot comes back when an idle socket goes, and when one says hello.
    idle[0]!.close();
    await idle[0]!.closed;
    const greeter = await waitFor(async () => {
      const socket = await RawSocket.open(node.wsUrl);
      socket.send(helloFrame(mesh, mesh.members[0]!));
      const outcome = await Promise.race([
        socket.next((f) => f.type === 'welcome').then(() => 'welcome'),
        socket.closed.then(() => 'closed'),
      ]);
      return outcome === 'welcome' ? socket : undefined;
    });
    const another = await RawSocket.open(node.wsUrl);
    const stillOpen = await within(
      another.closed.then(() => false),
      300,
      true,
    );
    expect(stillOpen).toBe(true);
    for (const socket of [...idle, greeter, another]) socket.close();
    await goodPeersServed(node, mesh, 0, 1);
  });
});

describe('one socket flooding the node with frames', () => {
  const RATE = 50;
  const BURST = 10;
  let node: InProcessNode;
  let mesh: TestMesh;
  beforeAll(async () => {
    node = await startNode({
      kind: 'in-process',
      databaseUrl: db.url,
      env: {
        FRAME_RATE_PER_SEC: String(RATE),
        FRAME_BURST: String(BURST),
        SEND_RATE_PER_MIN: '1000000',
        SEND_BURST: '1000000',
      },
    });
    mesh = await createMesh(node, 4);
  });
  afterAll(() => node?.stop());

  function counting(client: MeshClient) {
    const counter = { received: 0 };
    client.on('message', () => {
      counter.received++;
    });
    return counter;
  }

  it('is paced at FRAME_RATE_PER_SEC, not read while its queue is full, and its queue dropped when it goes', async () => {
    const receiver = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const counter = counting(receiver);
    const flooder = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[0]!));
    const started = Date.now();
    for (let i = 0; i < 400; i++) {
      flooder.send({ type: 'send', id: `flood-${i}`, to: mesh.members[1]!.pubkey, body: 'x'.repeat(1000) });
    }
    // While it floods, another member's DMs still go through on the same node.
    await goodPeersServed(node, mesh, 2, 3);
    // A second's worth handled: had the node not paced the flood, all 400 would be in by now.
    await waitFor(() => counter.received >= BURST + RATE, { timeoutMs: 10_000, what: "a second's frames" });
    const elapsedS = (Date.now() - started) / 1000;
    const handled = counter.received;
    expect(handled).toBeGreaterThan(0);
    expect(handled).toBeLessThanOrEqual(BURST + RATE * elapsedS + 15);
    const metrics = await (await fetch(`${node.url}/metrics`)).text();
    expect(metrics).toMatch(/mesh_broker_inbound_pauses_total\{reason="queue"[^}]*\} [1-9]/);

    // The flooder goes away: what it queued is not handled for a peer that is not there any more.
    // Measured from when the node saw it go (its sessions gauge drops), not from our side of the socket.
    const sessions = async () =>
      Number(
        /mesh_broker_connections\{[^}]*\} (\d+)/.exec(await (await fetch(`${node.url}/metrics`)).text())?.[1],
      );
    const before = await sessions();
    flooder.socket.terminate();
    await waitFor(async () => (await sessions()) === before - 1, { what: 'the node to see the close' });
    // Counted where the node accepts (the receiver may still be catching up on what was accepted before).
    const accepted = async () =>
      Number(
        /mesh_broker_messages_accepted_total\{[^}]*\} (\d+)/.exec(
          await (await fetch(`${node.url}/metrics`)).text(),
        )?.[1],
      );
    const atClose = await accepted();
    // A second and a half of pacing, measured by a witness: another session's 85 frames (the burst, then
    // 50 a second) are all answered only once the pacer has let 75 of them through one by one. Meanwhile
    // a gone flooder's queue must get nothing more accepted (no event says "not").
    const witness = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[2]!));
    const WITNESS_FRAMES = BURST + (RATE * 3) / 2;
    for (let i = 0; i < WITNESS_FRAMES; i++) {
      witness.send({ type: 'send', id: `witness-${i}`, to: mesh.members[3]!.pubkey, body: 'w' });
    }
    await witness.next((f) => f.type === 'sent' && f.id === `witness-${WITNESS_FRAMES - 1}`, 10_000);
    witness.close();
    // At most the one being handled then, besides the witness's own.
    expect((await accepted()) - atClose - WITNESS_FRAMES).toBeLessThanOrEqual(1);
    expect((await accepted()) - WITNESS_FRAMES).toBeLessThan(400 + 2); // the flood's and the good pair's DMs
  });
});

describe('a peer that stops reading', () => {
  let node: InProcessNode;
  let mesh: TestMesh;
  beforeAll(async () => {
    node = await startNode({
      kind: 'in-process',
      databaseUrl: db.url,
      env: { SEND_RATE_PER_MIN: '1000000', SEND_BURST: '1000000' },
    });
    mesh = await createMesh(node, 4);
  });
  afterAll(() => node?.stop());

  it('is fed only as fast as it reads: 18 MiB owed to it are not buffered, and all arrive in order once it reads', async () => {
    const slow = await rawSession(node.wsUrl, helloFrame(mesh, mesh.members[1]!));
    const tcp = (slow.socket as unknown as { _socket: { pause(): void; resume(): void } })._socket;
    tcp.pause();
    const sender = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const body = 'y'.repeat(30 * 1024);
    const COUNT = 600;
    for (let batch = 0; batch < COUNT; batch += 50) {
      await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          sender.send(mesh.members[1]!.pubkey, `${batch + i}:${body}`, { id: `slow-${batch + i}` }),
        ),
      );
    }
    // Other peers are served meanwhile.
    await goodPeersServed(node, mesh, 2, 3);
    // Before: the node buffered what the kernel would not take and closed the peer as "too slow" (1008).
    const closedEarly = await within(
      slow.closed.then(() => true),
      500,
      false,
    );
    expect(closedEarly).toBe(false);
    tcp.resume();
    const seen: number[] = [];
    while (seen.length < COUNT) {
      const frame = await slow.next((f) => f.type === 'message', 10_000);
      seen.push(Number(String(frame.body).split(':')[0]));
    }
    expect(seen).toEqual(Array.from({ length: COUNT }, (_, i) => i));
    slow.close();
  });
});
