/**
 * The SDK's side of stream positions (issue 28 items 2 and 4), against a stand-in broker over a real
 * WebSocket that speaks the contract of docs/protocol.md § Streams: `offset`/`epoch` on `stream.data` and
 * `stream.subscribed`, `since` on a resume, `recovered`/`reason`, `stream.gap`. What the SDK must do with
 * them: resume from the last position it delivered, drop replays it already delivered, report recovery
 * and gaps. (The broker's own side is tested with it in tests/integration/streams*.test.ts.)
 */
import { generateMemberKeys, MeshClient, type StreamGap, type StreamRecovery } from '@mesh-broker/sdk';
import { afterEach, describe, expect, it } from 'vitest';
import { type WebSocket, WebSocketServer } from 'ws';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

interface Received {
  frame: Record<string, unknown>;
  socket: WebSocket;
}

let server: WebSocketServer | undefined;
let client: MeshClient | undefined;
afterEach(async () => {
  client?.close();
  for (const socket of server?.clients ?? []) socket.terminate();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
});

/** A broker stand-in: welcomes every hello, and hands the test every other frame with its socket. */
async function standIn(): Promise<{ url: string; received: Received[] }> {
  const port = await freePort();
  server = new WebSocketServer({ port, host: '127.0.0.1' });
  await new Promise<void>((resolve) => server!.once('listening', () => resolve()));
  const received: Received[] = [];
  server.on('connection', (socket) => {
    socket.on('message', (data) => {
      const frame = JSON.parse(String(data)) as Record<string, unknown>;
      if (frame.type === 'hello') {
        const welcome = { type: 'welcome', v: 1, meshId: 'm', sessionId: frame.sessionId, node: 'stand-in' };
        socket.send(JSON.stringify({ ...welcome, resumed: Boolean(frame.resume), heartbeatMs: 30_000 }));
      } else if (frame.type !== 'ping') received.push({ frame, socket });
    });
  });
  return { url: `ws://127.0.0.1:${port}/ws`, received };
}

const send = (socket: WebSocket, frame: Record<string, unknown>) => socket.send(JSON.stringify(frame));
const data = (offset: number, epoch: string) => ({
  type: 'stream.data',
  stream: 'feed',
  data: offset,
  from: 'p',
  fromSession: 's',
  offset,
  epoch,
});

/** The next `stream.subscribe` the stand-in gets from index `from` on. */
async function nextSubscribe(received: Received[], from: number): Promise<Received> {
  return waitFor(() => received.slice(from).find((r) => r.frame.type === 'stream.subscribe'), {
    what: 'a stream.subscribe',
  });
}

describe('streams.subscribe with recover against a broker with positions', () => {
  it('resumes from the last delivered position, drops what it delivered already, reports recovery and gaps', async () => {
    const { url, received } = await standIn();
    client = new MeshClient({
      urls: [url],
      meshId: 'm',
      keys: generateMemberKeys(),
      retry: { initialDelayMs: 10, maxDelayMs: 20 },
    });
    const feed = client.streams.subscribe('feed', { recover: true });
    const delivered: Array<[number | undefined, string | undefined]> = [];
    const recoveries: StreamRecovery[] = [];
    const gaps: StreamGap[] = [];
    feed.on('data', (frame) => delivered.push([frame.offset, frame.epoch]));
    feed.on('recovered', (event) => recoveries.push(event));
    feed.on('gap', (event) => gaps.push(event));
    await client.connect();

    // First subscription: no `since`; the stream is at 10 of e1, then 11, 12, a repeated 12, 13.
    const first = await nextSubscribe(received, 0);
    expect(first.frame).not.toHaveProperty('since');
    send(first.socket, {
      type: 'stream.subscribed',
      stream: 'feed',
      rid: first.frame.rid,
      offset: 10,
      epoch: 'e1',
    });
    for (const offset of [11, 12, 12, 13]) send(first.socket, data(offset, 'e1'));
    await waitFor(() => delivered.length === 3, { what: 'three frames' });

    // Cut: the resume asks from 13; the replay repeats 12 and 13 (dropped), then 14, 15, live 16.
    const mark = received.length;
    first.socket.terminate();
    const second = await nextSubscribe(received, mark);
    expect(second.frame.since).toEqual({ offset: 13, epoch: 'e1' });
    const recovered = { type: 'stream.subscribed', stream: 'feed', rid: second.frame.rid };
    send(second.socket, { ...recovered, offset: 15, epoch: 'e1', recovered: true });
    for (const offset of [12, 13, 14, 15, 16]) send(second.socket, data(offset, 'e1'));
    // What the history could not fill: 17…20, reported, and a resume goes on from 20.
    send(second.socket, {
      type: 'stream.gap',
      stream: 'feed',
      epoch: 'e1',
      from: 17,
      to: 20,
      reason: 'trimmed',
    });
    await waitFor(() => gaps.length === 1, { what: 'the gap' });
    expect(delivered.map(([offset]) => offset)).toEqual([11, 12, 13, 14, 15, 16]);
    expect(recoveries).toEqual([
      {
        stream: 'feed',
        recovered: true,
        since: { offset: 13, epoch: 'e1' },
        position: { offset: 15, epoch: 'e1' },
      },
    ]);
    expect(gaps).toEqual([{ stream: 'feed', epoch: 'e1', from: 17, to: 20, reason: 'trimmed' }]);

    // Cut again: the history is gone (a new epoch): recovered false with the reason, then e2 from 1.
    const mark2 = received.length;
    second.socket.terminate();
    const third = await nextSubscribe(received, mark2);
    expect(third.frame.since).toEqual({ offset: 20, epoch: 'e1' });
    send(third.socket, {
      ...{ type: 'stream.subscribed', stream: 'feed', rid: third.frame.rid },
      ...{ offset: 0, epoch: 'e2', recovered: false, reason: 'epoch changed' },
    });
    send(third.socket, data(1, 'e2'));
    await waitFor(() => delivered.length === 7, { what: 'the frame of the new epoch' });
    expect(delivered.at(-1)).toEqual([1, 'e2']);
    expect(recoveries.at(-1)).toMatchObject({ recovered: false, reason: 'epoch changed' });
    expect(feed.position).toEqual({ offset: 1, epoch: 'e2' });
  });

  it('without recover, sends no since and delivers every frame; frames without positions are delivered as they come', async () => {
    const { url, received } = await standIn();
    client = new MeshClient({
      urls: [url],
      meshId: 'm',
      keys: generateMemberKeys(),
      retry: { initialDelayMs: 10 },
    });
    await client.connect();
    const plain = client.streams.subscribe('feed');
    const got: unknown[] = [];
    plain.on('data', (frame) => got.push(frame.data));
    const first = await nextSubscribe(received, 0);
    send(first.socket, { type: 'stream.subscribed', stream: 'feed', rid: first.frame.rid });
    await plain.ready;
    send(first.socket, { type: 'stream.data', stream: 'feed', data: 'a', from: 'p', fromSession: 's' });
    send(first.socket, { type: 'stream.data', stream: 'feed', data: 'a', from: 'p', fromSession: 's' });
    send(first.socket, { type: 'stream.data', stream: 'other', data: 'x', from: 'p', fromSession: 's' });
    await waitFor(() => got.length === 2, { what: 'two frames' });
    const mark = received.length;
    first.socket.terminate();
    const second = await nextSubscribe(received, mark);
    expect(second.frame).not.toHaveProperty('since');
    expect(got).toEqual(['a', 'a']);
  });

  it('a refused subscription rejects ready and emits error', async () => {
    const { url, received } = await standIn();
    client = new MeshClient({ urls: [url], meshId: 'm', keys: generateMemberKeys() });
    await client.connect();
    const sub = client.streams.subscribe('feed');
    const errors: string[] = [];
    sub.on('error', (error) => errors.push(error.code));
    const first = await nextSubscribe(received, 0);
    send(first.socket, { type: 'error', code: 'limit_exceeded', message: 'too many', rid: first.frame.rid });
    await expect(sub.ready).rejects.toMatchObject({ code: 'limit_exceeded' });
    expect(errors).toEqual(['limit_exceeded']);
  });
});
