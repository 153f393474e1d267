/**
 * A session's first frame is its welcome (docs/protocol.md § hello), though its socket joins the mesh's
 * fan-out before the welcome is written (broker/ws/gateway.ts: the connection is added, presence attaches,
 * the session's hooks run, then the welcome). What the mesh says meanwhile (another peer's peer.left, a
 * tick) is held by the Connection and written after the welcome, in order, bounded. Seen in a full run as
 * `workbench fuzz: no welcome: {"type":"peer.left",…}`. The socket is a stand-in with what Connection reads
 * of ws's WebSocket, tests/helpers/stand-in-socket.ts: what is checked is Connection's ordering.
 */
import { describe, expect, it } from 'vitest';
import { type StandInSocket, standInConnection } from '../helpers/stand-in-socket.js';

const connection = () => standInConnection();

const types = (socket: StandInSocket) => socket.sent.map((text) => JSON.parse(text).type);

describe('the welcome is the first frame of a session', () => {
  it('holds what the mesh sends between the hello and the welcome, then writes it after, in order', () => {
    const { socket, connection: c } = connection();
    c.holdUntilWelcome();
    c.send({ type: 'peer.left', n: 1 });
    c.sendText(JSON.stringify({ type: 'clock.tick', n: 2 }));
    expect(socket.sent).toEqual([]);
    c.sendWelcome({ type: 'welcome' });
    c.send({ type: 'message', n: 3 });
    expect(types(socket)).toEqual(['welcome', 'peer.left', 'clock.tick', 'message']);
  });

  it('writes at once when nothing is held (frames before a hello, such as errors, are not held)', () => {
    const { socket, connection: c } = connection();
    c.send({ type: 'error', code: 'no_hello' });
    expect(types(socket)).toEqual(['error']);
  });

  it('closes a socket that is sent more than its buffer may hold before its welcome', () => {
    const { socket, connection: c } = connection();
    c.holdUntilWelcome();
    for (let i = 0; i < 2000 && !socket.closed; i++) c.sendText('x'.repeat(64 * 1024));
    expect(socket.closed?.code).toBe(1008);
    expect(socket.sent).toEqual([]);
  });
});
