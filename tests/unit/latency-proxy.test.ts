import { createHash } from 'node:crypto';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Random } from '../../cli/fuzz/random.js';
import { freePort } from '../../cli/ports.js';
import {
  LatencyProxy,
  LatencyProxyOptionError,
  type LatencyProxyOptions,
} from '../../cli/proxies/latency-proxy.js';
import { pause, waitFor } from '../helpers/wait.js';

/** A loaded 2-core machine adds scheduling delay on top of the proxy's: a generous upper slack. */
const SLACK_MS = 200;

/** An echo server that counts the connections and bytes it got (to see what a cut link lets through). */
interface EchoServer {
  server: Server;
  port: number;
  connections: number;
  received: number;
}

let echo: EchoServer;
const proxies: LatencyProxy[] = [];
const sockets: Socket[] = [];
const servers: Server[] = [];

beforeAll(async () => {
  echo = await echoServer();
});

afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  await Promise.all(proxies.splice(0).map((p) => p.close()));
  await Promise.all(servers.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
});

afterAll(async () => {
  await new Promise((resolve) => echo.server.close(resolve));
});

async function echoServer(): Promise<EchoServer> {
  const state = { connections: 0, received: 0 } as EchoServer;
  state.server = createServer((socket) => {
    state.connections++;
    sockets.push(socket);
    socket.on('data', (chunk) => {
      state.received += chunk.length;
      socket.write(chunk);
    });
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => state.server.listen(0, '127.0.0.1', resolve));
  state.port = (state.server.address() as { port: number }).port;
  return state;
}

async function proxy(options: Partial<LatencyProxyOptions> = {}): Promise<LatencyProxy> {
  const started = await LatencyProxy.start({ upstream: `127.0.0.1:${echo.port}`, ...options });
  proxies.push(started);
  return started;
}

/** A connected client with everything it received so far. */
async function client(port: number): Promise<Socket & { received: Buffer[] }> {
  const socket = connect(port, '127.0.0.1') as Socket & { received: Buffer[] };
  socket.setNoDelay(true);
  socket.received = [];
  socket.on('data', (chunk) => socket.received.push(chunk));
  socket.on('error', () => {});
  sockets.push(socket);
  await new Promise((resolve) => socket.once('connect', resolve));
  return socket;
}

const text = (socket: { received: Buffer[] }) => Buffer.concat(socket.received).toString();

/** Sends `message` and resolves with the ms until all of it came back. */
async function roundTrip(socket: Socket & { received: Buffer[] }, message: string): Promise<number> {
  const before = Buffer.concat(socket.received).length;
  const started = performance.now();
  socket.write(message);
  await waitFor(() => Buffer.concat(socket.received).length >= before + message.length, {
    timeoutMs: 5000,
    intervalMs: 1,
    what: `echo of ${message}`,
  });
  return performance.now() - started;
}

/**
 * One round trip through a fresh proxy with `delayMs` to an echo server of its own (so the shared echo's
 * counts stay the test's): the witness that a delay period has passed for timers armed before it.
 */
async function witnessRoundTrip(delayMs: number): Promise<void> {
  const own = await echoServer();
  servers.push(own.server);
  const witness = await LatencyProxy.start({ upstream: `127.0.0.1:${own.port}`, delayMs });
  proxies.push(witness);
  await roundTrip(await client(witness.port), 'witness');
}

describe('latency proxy: delay', () => {
  it('a round trip through it takes at least twice the one-way delay, and not much more', async () => {
    const p = await proxy({ delayMs: 50 });
    const socket = await client(p.port);
    for (let i = 0; i < 5; i++) {
      const rtt = await roundTrip(socket, `ping ${i}\n`);
      expect(rtt).toBeGreaterThanOrEqual(100);
      expect(rtt).toBeLessThan(100 + SLACK_MS);
    }
    expect(text(socket)).toBe([0, 1, 2, 3, 4].map((i) => `ping ${i}\n`).join(''));
    const stats = p.stats();
    expect(stats).toMatchObject({ connections: 1, open: 1, bufferedBytes: 0, cut: false });
    expect(stats.bytesToUpstream).toBe(35);
    expect(stats.bytesToClient).toBe(35);
  });

  it('jitter adds to the delay, never takes from it', async () => {
    const p = await proxy({ delayMs: 20, jitterMs: 40, seed: 7 });
    const socket = await client(p.port);
    const rtts: number[] = [];
    for (let i = 0; i < 8; i++) rtts.push(await roundTrip(socket, `j${i}`));
    for (const rtt of rtts) {
      expect(rtt).toBeGreaterThanOrEqual(40);
      expect(rtt).toBeLessThan(2 * (20 + 40) + SLACK_MS);
    }
    // The draws differ: not one fixed delay.
    expect(Math.max(...rtts) - Math.min(...rtts)).toBeGreaterThan(5);
  });

  it('setDelay changes the delay of what is sent from then on', async () => {
    const p = await proxy({ delayMs: 80 });
    const socket = await client(p.port);
    expect(await roundTrip(socket, 'slow')).toBeGreaterThanOrEqual(160);
    p.setDelay(0);
    expect(p.delayMs).toBe(0);
    expect(await roundTrip(socket, 'fast')).toBeLessThan(SLACK_MS);
    p.setDelay(60, 0);
    expect(await roundTrip(socket, 'slow again')).toBeGreaterThanOrEqual(120);
    expect(() => p.setDelay(-5)).toThrow(/delayMs must be a number of milliseconds from 0 to 10000, not -5/);
    expect(() => p.setDelay(10, 20_000)).toThrow(/jitterMs/);
    expect(p.delayMs).toBe(60); // a rejected change changes nothing
  });

  it('keeps byte order within a direction under jitter much larger than the gaps between writes', async () => {
    // Writes ~1 ms apart with up to 40 ms of jitter each: any scheduling by own due time alone reorders.
    const p = await proxy({ delayMs: 5, jitterMs: 40, seed: 3 });
    const socket = await client(p.port);
    const before = echo.received;
    const sent: string[] = [];
    for (let i = 0; i < 300; i++) {
      const line = `${i},`;
      sent.push(line);
      socket.write(line);
      await pause(1, 'writes about a millisecond apart, far less than the jitter: the order under test');
    }
    const expected = sent.join('');
    await waitFor(() => text(socket).length >= expected.length, { timeoutMs: 10_000, what: 'every echo' });
    expect(text(socket)).toBe(expected);
    expect(echo.received - before).toBe(expected.length);
  });
});

describe('latency proxy: cut and restore', () => {
  it('a cut link holds the bytes of open connections and the connections made meanwhile; restore delivers them in order', async () => {
    const p = await proxy({ delayMs: 10 });
    const open = await client(p.port);
    expect(await roundTrip(open, 'before;')).toBeGreaterThanOrEqual(20);
    const connectionsBefore = echo.connections;
    const receivedBefore = echo.received;

    p.cut();
    expect(p.stats().cut).toBe(true);
    open.write('during-1;');
    open.write('during-2;');
    const late = await client(p.port); // the proxy's listener answers; nothing goes further
    late.write('hello from a new connection');
    // Every byte is in the proxy, held; then one round trip through a witness proxy of the same delay:
    // its timers, armed later, have fired, so any timer forwarding the held bytes would have fired too.
    await waitFor(() => p.stats().bufferedBytes === 18 + 27, { what: 'the bytes written held by the proxy' });
    await witnessRoundTrip(10);
    expect(echo.received).toBe(receivedBefore);
    expect(echo.connections).toBe(connectionsBefore);
    expect(text(open)).toBe('before;');
    expect(text(late)).toBe('');
    expect(p.stats()).toMatchObject({ open: 2, cut: true, bufferedBytes: 18 + 27 });
    expect(open.destroyed || late.destroyed).toBe(false); // stalled, not dropped

    p.restore();
    await waitFor(() => text(open) === 'before;during-1;during-2;' && text(late).length === 27, {
      what: 'held bytes delivered',
    });
    expect(text(late)).toBe('hello from a new connection');
    expect(echo.connections).toBe(connectionsBefore + 1);
    expect(p.stats()).toMatchObject({ cut: false, bufferedBytes: 0 });
    // And the link carries new traffic as before.
    expect(await roundTrip(open, 'after;')).toBeGreaterThanOrEqual(20);
  });

  it("cut('to-upstream') holds only what the client sends: upstream hears nothing, its own bytes still arrive", async () => {
    // An upstream that speaks first on its own (a greeting every 20 ms), to see the other direction flow.
    const talker = createServer((socket) => {
      sockets.push(socket);
      const timer = setInterval(() => socket.write('t'), 20);
      socket.on('close', () => clearInterval(timer));
      socket.on('data', (chunk) => socket.write(`[${chunk}]`));
      socket.on('error', () => {});
    });
    servers.push(talker);
    await new Promise<void>((resolve) => talker.listen(0, '127.0.0.1', resolve));
    const p = await proxy({ upstream: `127.0.0.1:${(talker.address() as { port: number }).port}` });
    const socket = await client(p.port);
    await waitFor(() => text(socket).includes('t'), { what: 'the first greeting' });
    p.cut('to-upstream');
    expect(p.stats()).toMatchObject({ cut: true, cutDirection: 'to-upstream' });
    socket.write('held');
    const seen = text(socket).length;
    await waitFor(() => text(socket).length >= seen + 5, { what: 'greetings during the one-way cut' });
    await pause(100, 'for any answer to the held bytes to show');
    expect(text(socket)).not.toContain('[held]'); // upstream never got it, so never answered it
    expect(p.stats().bufferedBytes).toBe(4);
    p.restore();
    await waitFor(() => text(socket).includes('[held]'), { what: 'held bytes delivered after restore' });
  });

  it("cut('to-client') holds only what upstream sends: it gets the client's bytes, the client gets nothing", async () => {
    const p = await proxy();
    const socket = await client(p.port);
    await roundTrip(socket, 'before;');
    const receivedBefore = echo.received;
    p.cut('to-client');
    socket.write('one-way;');
    await waitFor(() => echo.received === receivedBefore + 8, { what: 'upstream receiving during the cut' });
    await witnessRoundTrip(0);
    await pause(50, 'for a leaked echo to arrive');
    expect(text(socket)).toBe('before;'); // the echo is held in the proxy
    expect(p.stats().bufferedBytes).toBe(8);
    // A new connection waits for the heal: a handshake needs both directions.
    const connectionsBefore = echo.connections;
    const late = await client(p.port);
    late.write('late');
    await pause(100, 'for a connection upstream to show');
    expect(echo.connections).toBe(connectionsBefore);
    p.restore();
    await waitFor(() => text(socket) === 'before;one-way;' && text(late) === 'late', {
      what: 'held echoes delivered after restore',
    });
  });

  it('a marked cut holds only the connections the mark accepted; the others, new ones included, flow', async () => {
    const p = await proxy({ mark: (chunk) => chunk.includes('SUBSCRIBE') });
    const subscriber = await client(p.port);
    const other = await client(p.port);
    await roundTrip(subscriber, 'SUBSCRIBE bus;');
    await roundTrip(other, 'GET x;');
    expect(p.stats().marked).toBe(1);
    p.cut('to-client', { marked: true });
    subscriber.write('SUBSCRIBE more;');
    expect(await roundTrip(other, 'GET y;')).toBeLessThan(5000);
    expect(await roundTrip(await client(p.port), 'fresh;')).toBeLessThan(5000);
    await witnessRoundTrip(0);
    expect(text(subscriber)).toBe('SUBSCRIBE bus;');
    p.restore();
    await waitFor(() => text(subscriber) === 'SUBSCRIBE bus;SUBSCRIBE more;', { what: 'held echo' });
  });

  it('refuses a cut direction it does not know, and a marked cut without a mark', async () => {
    const p = await proxy();
    expect(() => p.cut('sideways' as never)).toThrow(LatencyProxyOptionError);
    expect(() => p.cut('both', { marked: true })).toThrow(/needs the mark option/);
    expect(p.stats().cut).toBe(false);
  });

  it('a connection closed while the link is cut is released, and never reaches upstream', async () => {
    const p = await proxy();
    p.cut();
    const connectionsBefore = echo.connections;
    const socket = await client(p.port);
    socket.write('lost');
    await waitFor(() => p.stats().open === 1, { what: 'accepted' });
    socket.destroy();
    await waitFor(() => p.stats().open === 0, { what: 'released' });
    p.restore();
    // A connection made after the restore goes through: the released one, made before it, would have
    // reached upstream first. Upstream sees the witness's connection only.
    const witness = await client(p.port);
    await roundTrip(witness, 'witness');
    expect(echo.connections).toBe(connectionsBefore + 1);
  });

  it('a client that ends its side gets the rest of the answer, then the close (FIN in order behind data)', async () => {
    // A server that answers only once the client has finished sending (like `nc -q`).
    const server = createServer({ allowHalfOpen: true }, (socket) => {
      const parts: Buffer[] = [];
      socket.on('data', (chunk) => parts.push(chunk));
      socket.on('end', () => socket.end(`got ${Buffer.concat(parts).length} bytes`));
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const p = await proxy({ upstream: { port: (server.address() as { port: number }).port }, delayMs: 20 });
    const socket = connect({ port: p.port, host: '127.0.0.1', allowHalfOpen: true });
    sockets.push(socket);
    const parts: Buffer[] = [];
    socket.on('data', (chunk) => parts.push(chunk));
    const closed = new Promise((resolve) => socket.once('close', resolve));
    socket.end('x'.repeat(1000));
    await closed;
    expect(Buffer.concat(parts).toString()).toBe('got 1000 bytes');
    await waitFor(() => p.stats().open === 0, { what: 'connection released' });
  });

  it('close() ends every connection and stops listening', async () => {
    const p = await proxy({ delayMs: 5 });
    const socket = await client(p.port);
    await roundTrip(socket, 'x');
    const closed = new Promise((resolve) => socket.once('close', resolve));
    await p.close();
    await closed;
    const refused = await new Promise<Error>((resolve, reject) => {
      const late = connect(p.port, '127.0.0.1');
      late.once('connect', () => reject(new Error('the closed proxy still accepts connections')));
      late.once('error', resolve);
    });
    expect(refused.message).toMatch(/ECONNREFUSED/);
  });
});

describe('latency proxy: back-pressure', () => {
  it('a receiver that does not read pauses the sender; the proxy holds a bounded amount; nothing is lost', async () => {
    const MAX = 256 * 1024;
    // A server that does not read at first: its connection is paused until we let it go.
    let upstreamSocket: Socket | undefined;
    const hash = createHash('sha256');
    let got = 0;
    const server = createServer((socket) => {
      upstreamSocket = socket;
      socket.pause();
      socket.on('data', (chunk) => {
        got += chunk.length;
        hash.update(chunk);
      });
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const p = await proxy({
      upstream: { port: (server.address() as { port: number }).port },
      delayMs: 5,
      maxBufferedBytes: MAX,
    });
    const socket = await client(p.port);
    const random = new Random(11);
    const block = random.bytes(64 * 1024);
    const TOTAL = 32 * 1024 * 1024; // far more than the kernel's loopback socket buffers hold
    const sentHash = createHash('sha256');
    for (let sent = 0; sent < TOTAL; sent += block.length) {
      socket.write(block); // ignores write()'s false on purpose: the client's own buffer takes the rest
      sentHash.update(block);
    }
    await waitFor(() => upstreamSocket, { what: 'upstream connection' });
    // The upstream reads nothing, so the proxy's queue fills until it reaches its limit and it stops reading.
    const peak = await waitFor(
      () => {
        const buffered = p.stats().bufferedBytes;
        return buffered >= MAX ? buffered : 0;
      },
      { timeoutMs: 10_000, what: 'the proxy holding its limit' },
    );
    // It stopped reading at its limit (plus at most the one socket read that crossed it)…
    expect(peak).toBeLessThanOrEqual(MAX + 64 * 1024);
    // …so most of the data is still waiting at the sender, not in the proxy.
    expect(socket.writableLength).toBeGreaterThan(TOTAL / 2);

    upstreamSocket!.resume();
    await waitFor(() => got === TOTAL, { timeoutMs: 20_000, what: 'every byte upstream' });
    expect(hash.digest('hex')).toBe(sentHash.digest('hex'));
    expect(p.stats()).toMatchObject({ bytesToUpstream: TOTAL, bufferedBytes: 0 });
  });
});

describe('latency proxy: bad options', () => {
  it.each([
    [{ delayMs: -1 }, /delayMs must be a number of milliseconds from 0 to 10000, not -1/],
    [{ delayMs: Number.NaN }, /delayMs/],
    [{ jitterMs: 60_000 }, /jitterMs must be a number of milliseconds from 0 to 10000, not 60000/],
    [{ port: 70_000 }, /port must be an integer from 0 to 65535, not 70000/],
    [{ port: 1.5 }, /port must be an integer/],
    [{ upstream: 'no-port-here' }, /upstream must be host:port or \{ host, port \}, not no-port-here/],
    [{ upstream: 'localhost:http' }, /upstream port must be an integer from 1 to 65535, not NaN/],
    [{ upstream: { port: 0 } }, /upstream port must be an integer from 1 to 65535, not 0/],
    [{ maxBufferedBytes: 0 }, /maxBufferedBytes must be a positive integer, not 0/],
    [{ seed: 0.5 }, /seed must be an integer/],
  ] as Array<[Partial<LatencyProxyOptions>, RegExp]>)(
    '%o is refused before anything listens',
    async (bad, message) => {
      const port = await freePort();
      const started = proxy({ port, ...bad });
      await expect(started).rejects.toThrow(LatencyProxyOptionError);
      await expect(started).rejects.toThrow(message);
      // The port it was asked to use is still free: nothing listened, not even for a moment.
      const probe = createServer();
      await new Promise<void>((resolve, reject) => {
        probe.once('error', reject);
        probe.listen(port, '127.0.0.1', resolve);
      });
      await new Promise((resolve) => probe.close(resolve));
    },
  );
});
