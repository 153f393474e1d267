/**
 * The SDK's side of the mesh clock (docs/sdk.md § Clock), against a stand-in broker over a real WebSocket:
 * `clock.onTick` hands over a tick only after the last one. A session that moves between nodes can get the
 * tick in flight twice (from the node it left and, over the bus, from the one it joined: a chaos run's
 * leader pause showed tick 80 twice); the application must not see it again, while a new epoch with a lower
 * tick (a restored database) still passes, and the raw `frame` event still sees every frame.
 */
import { generateMemberKeys, MeshClient } from '@mesh-broker/sdk';
import { afterEach, describe, expect, it } from 'vitest';
import { type WebSocket, WebSocketServer } from 'ws';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

let server: WebSocketServer | undefined;
const clients: MeshClient[] = [];
afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  for (const socket of server?.clients ?? []) socket.terminate();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
});

/** A broker stand-in that welcomes every hello; the test gets each welcomed socket to send ticks on. */
async function standIn(): Promise<{ url: string; sockets: WebSocket[] }> {
  const port = await freePort();
  server = new WebSocketServer({ port, host: '127.0.0.1' });
  await new Promise<void>((resolve) => server!.once('listening', () => resolve()));
  const sockets: WebSocket[] = [];
  server.on('connection', (socket) => {
    socket.on('message', (data) => {
      const frame = JSON.parse(String(data)) as Record<string, unknown>;
      if (frame.type !== 'hello') return;
      const welcome = { type: 'welcome', v: 1, meshId: 'm', sessionId: frame.sessionId, node: 'stand-in' };
      socket.send(JSON.stringify({ ...welcome, resumed: Boolean(frame.resume), heartbeatMs: 30_000 }));
      sockets.push(socket);
    });
  });
  return { url: `ws://127.0.0.1:${port}/ws`, sockets };
}

const tick = (n: number, epoch: number) =>
  JSON.stringify({ type: 'clock.tick', tick: n, epoch, speed: 1, simTime: new Date(n * 1000).toISOString() });

function connected(url: string, dedup?: boolean): MeshClient {
  const client = new MeshClient({
    urls: [url],
    meshId: 'm',
    keys: generateMemberKeys(),
    retry: { initialDelayMs: 10, maxDelayMs: 20 },
    ...(dedup === undefined ? {} : { dedup }),
  });
  clients.push(client);
  return client;
}

describe('clock.onTick', () => {
  it('drops a tick at or before the last one across a reconnect; a new epoch with a lower tick passes', async () => {
    const { url, sockets } = await standIn();
    const client = connected(url);
    const seen: Array<[number, number]> = [];
    let frames = 0;
    client.clock.onTick((t) => seen.push([t.tick, t.epoch]));
    client.on('frame', (f) => {
      if (f.type === 'clock.tick') frames++;
    });
    await client.connect();
    for (const n of [78, 79, 80]) sockets[0]!.send(tick(n, 1));
    await waitFor(() => seen.length === 3, { what: 'three ticks' });

    // The session moves: the node it joined relays the tick in flight (80) again, then goes on.
    sockets[0]!.terminate();
    await waitFor(() => sockets.length === 2, { what: 'the reconnect' });
    for (const n of [80, 79, 81]) sockets[1]!.send(tick(n, 1));
    // A restored database: the next leader's epoch is newer, its tick lower.
    sockets[1]!.send(tick(40, 2));
    await waitFor(() => frames === 7, { what: 'every frame' });
    await waitFor(() => seen.length === 5, { what: 'the new epoch' });
    expect(seen).toEqual([
      [78, 1],
      [79, 1],
      [80, 1],
      [81, 1],
      [40, 2],
    ]);
  });

  it('hands over every tick with dedup off (the chaos plant sdk-dedup-off)', async () => {
    const { url, sockets } = await standIn();
    const client = connected(url, false);
    const seen: number[] = [];
    client.clock.onTick((t) => seen.push(t.tick));
    await client.connect();
    for (const n of [5, 5, 4]) sockets[0]!.send(tick(n, 1));
    await waitFor(() => seen.length === 3, { what: 'three ticks' });
    expect(seen).toEqual([5, 5, 4]);
  });
});
