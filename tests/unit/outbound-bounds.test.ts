/**
 * The node's outbound bounds (SECURITY.md § outbound; broker/connections/connection.ts, broker/ws/gateway.ts):
 * each socket's share of NODE_OUTBOUND_BUDGET, the congestion mark below it, the wake-up on drain, and the
 * 1 MiB reply backstop. The socket here is a stand-in for ws's WebSocket with only what Connection reads
 * (readyState, bufferedAmount, send, close, the TCP socket under it): what is checked is Connection's own
 * arithmetic, which the WebSocket tests (tests/integration/abuse-gateway.test.ts) exercise only at one
 * socket count.
 */
import { describe, expect, it, vi } from 'vitest';
import { NODE_OUTBOUND_BUDGET, OUTBOUND_HIGH_WATER } from '../../broker/connections/connection.js';
import { MAX_REPLY_BYTES, serializeReply } from '../../broker/ws/gateway.js';
import { ProtocolError } from '../../protocol/errors.js';
import { standInConnection } from '../helpers/stand-in-socket.js';

const KiB = 1024;
const MiB = 1024 * KiB;

const connection = standInConnection;

/** The most a socket can hold before a write closes it, found by writing: a frame of `size` at `buffered`. */
function closesAt(sockets: number, buffered: number, size: number): boolean {
  const { socket, connection: c } = connection(sockets);
  socket.bufferedAmount = buffered;
  c.sendText('x'.repeat(size));
  return socket.closed?.code === 1008;
}

describe("a socket's share of the node's outbound budget", () => {
  it('is 4 MiB while few sockets share the budget', () => {
    expect(closesAt(1, 4 * MiB - 10 * KiB, 8 * KiB)).toBe(false);
    expect(closesAt(1, 4 * MiB - 10 * KiB, 12 * KiB)).toBe(true);
  });

  it('shrinks with the sockets on the node, so that together they stay within the budget', () => {
    const sockets = 64; // 64 MiB / 64 = 1 MiB each
    const share = NODE_OUTBOUND_BUDGET / sockets;
    expect(closesAt(sockets, share - 2 * KiB, KiB)).toBe(false);
    expect(closesAt(sockets, share - 2 * KiB, 3 * KiB)).toBe(true);
  });

  it('never goes below 512 KiB (room for the largest frame the node sends)', () => {
    expect(closesAt(100_000, 400 * KiB, 64 * KiB)).toBe(false);
    expect(closesAt(100_000, 500 * KiB, 64 * KiB)).toBe(true);
  });

  it('is congested at half its share, at most OUTBOUND_HIGH_WATER: a feed stopping there never reaches the close', () => {
    const few = connection(1);
    few.socket.bufferedAmount = OUTBOUND_HIGH_WATER;
    expect(few.connection.congested).toBe(false);
    few.socket.bufferedAmount = OUTBOUND_HIGH_WATER + 1;
    expect(few.connection.congested).toBe(true);

    const many = connection(100_000); // share 512 KiB: congested past 256 KiB
    many.socket.bufferedAmount = 256 * KiB + 1;
    expect(many.connection.congested).toBe(true);
  });
});

describe('whenDrained', () => {
  it("resolves on the TCP socket's drain, not after a poll", async () => {
    // Fake timers: a second of the socket's life passes at once, every recheck timer in it run.
    vi.useFakeTimers();
    try {
      const { socket, connection: c } = connection(1);
      socket.bufferedAmount = 2 * MiB;
      let drained = false;
      const waiting = c.whenDrained().then(() => {
        drained = true;
      });
      await vi.advanceTimersByTimeAsync(1000);
      expect(drained).toBe(false); // still congested: no timer let it go
      socket.bufferedAmount = 0;
      socket._socket.emit('drain');
      await waiting;
      expect(drained).toBe(true);
    } finally {
      vi.useRealTimers();
    }
  });

  it('resolves when the socket closes while congested', async () => {
    const { socket, connection: c } = connection(1);
    socket.bufferedAmount = 2 * MiB;
    const waiting = c.whenDrained();
    socket.readyState = socket.CLOSED;
    socket._socket.emit('close');
    await expect(waiting).resolves.toBeUndefined();
  });
});

describe('the reply backstop', () => {
  it(`refuses a reply over ${MAX_REPLY_BYTES} bytes as too_large rather than buffering it`, () => {
    const small = serializeReply({ type: 'pong' } as never, 'r1');
    expect(JSON.parse(small)).toEqual({ type: 'pong', rid: 'r1' });
    const huge = { type: 'peers.list_result', peers: [{ note: 'x'.repeat(MAX_REPLY_BYTES) }] } as never;
    let error: unknown;
    try {
      serializeReply(huge, 'r2');
    } catch (thrown) {
      error = thrown;
    }
    expect(error).toBeInstanceOf(ProtocolError);
    expect((error as ProtocolError).code).toBe('too_large');
  });
});
