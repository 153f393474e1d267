import { connect, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Random } from '../../cli/fuzz/random.js';
import { LossyRedisProxy, type LossyRedisProxyOptions } from '../../cli/proxies/lossy-redis-proxy.js';
import { PublishLoss } from '../../cli/proxies/publish-loss.js';
import { ReplyScanner } from '../../cli/proxies/resp-reply-scanner.js';
import { RequestParser, type RequestSink, splitArgs } from '../../cli/proxies/resp-request-parser.js';
import { ThrowawayRedis } from '../helpers/redis-server.js';
import { waitFor, within } from '../helpers/wait.js';

let redis: ThrowawayRedis;
const proxies: LossyRedisProxy[] = [];
const clients: Redis[] = [];

beforeAll(async () => {
  redis = await ThrowawayRedis.start();
});

afterEach(async () => {
  for (const client of clients.splice(0)) client.disconnect();
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});

afterAll(async () => {
  await redis?.stop();
});

async function proxy(options: Partial<LossyRedisProxyOptions> = {}): Promise<LossyRedisProxy> {
  const started = await LossyRedisProxy.start({ upstream: redis.url, ...options });
  proxies.push(started);
  return started;
}

/** A client that does not reconnect, and counts the times its connection closed. */
function client(url: string): Redis & { closes: number } {
  const c = new Redis(url, { retryStrategy: () => null, maxRetriesPerRequest: 0 }) as Redis & {
    closes: number;
  };
  c.closes = 0;
  c.on('close', () => c.closes++);
  c.on('error', () => {});
  clients.push(c);
  return c;
}

/** A subscriber recording every message of `channel` (resolves once subscribed). */
async function subscriber(url: string, channel: string): Promise<{ messages: string[]; client: Redis }> {
  const c = client(url);
  const messages: string[] = [];
  c.on('message', (ch: string, message: string) => {
    if (ch === channel) messages.push(message);
  });
  await c.subscribe(channel);
  return { messages, client: c };
}

/** The seeded decisions the proxy makes: draw i < rate drops the i-th matching publish. */
function drops(seed: number, rate: number, count: number): boolean[] {
  const random = new Random(seed);
  return Array.from({ length: count }, () => random.next() < rate);
}

/**
 * Writes each buffer on a raw connection to `port` (with `apart`, each once the one before was handed to the
 * kernel: with Nagle off, a TCP segment of its own, which is what the test is about), then collects
 * what comes back until `until(text)` holds or the connection closes, for at most `ms` (a bound, not a
 * sleep, whenever `until` is given).
 */
async function raw(
  port: number,
  writes: Buffer[],
  {
    ms = 300,
    apart = false,
    until,
  }: { ms?: number; apart?: boolean; until?: (text: string) => boolean } = {},
): Promise<{ text: string; closed: boolean }> {
  const socket: Socket = connect(port, '127.0.0.1');
  socket.setNoDelay(true);
  const received: Buffer[] = [];
  let closed = false;
  const text = () => Buffer.concat(received).toString('latin1');
  const settled = new Promise<void>((resolve) => {
    socket.on('data', (chunk) => {
      received.push(chunk);
      if (until?.(text())) resolve();
    });
    socket.on('close', () => {
      closed = true;
      resolve();
    });
  });
  socket.on('error', () => {});
  await new Promise((resolve) => socket.once('connect', resolve));
  for (const bytes of writes) {
    if (closed) break;
    if (apart) await new Promise<void>((resolve) => socket.write(bytes, () => resolve()));
    else socket.write(bytes);
  }
  await within(settled, ms, undefined);
  socket.destroy();
  return { text: text(), closed };
}

const resp = (...args: (string | Buffer)[]) =>
  Buffer.concat([
    Buffer.from(`*${args.length}\r\n`),
    ...args.flatMap((a) => {
      const b = Buffer.isBuffer(a) ? a : Buffer.from(a);
      return [Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n')];
    }),
  ]);

const bytewise = (b: Buffer) => Array.from(b, (byte) => Buffer.from([byte]));

describe('lossy redis proxy, loss 0: a transparent proxy', () => {
  it('GET/SET, binary values, pipelines and pub/sub go through unchanged', async () => {
    const p = await proxy();
    const c = client(p.url);
    expect(await c.set('plain', 'value')).toBe('OK');
    expect(await c.get('plain')).toBe('value');
    const binary = Buffer.from([0, 13, 10, 42, 36, 255, 13, 10, 0]);
    await c.set('binary', binary);
    expect((await c.getBuffer('binary'))!.equals(binary)).toBe(true);

    const pipeline = c.pipeline();
    for (let i = 0; i < 200; i++) pipeline.set(`k${i}`, `v${i}`).get(`k${i}`).incr('counter');
    const results = await pipeline.exec();
    expect(results!.map(([error, value]) => error ?? value)).toEqual(
      Array.from({ length: 200 }, (_, i) => ['OK', `v${i}`, i + 1]).flat(),
    );

    const { messages } = await subscriber(p.url, 'news');
    expect(await c.publish('news', 'one')).toBe(1);
    expect(await c.publish('news', 'two')).toBe(1);
    await waitFor(() => messages.length === 2, { what: 'two messages' });
    expect(messages).toEqual(['one', 'two']);
    expect(p.stats()).toMatchObject({ publishes: 2, forwarded: 2, dropped: 0 });
    expect(c.closes).toBe(0);
  });

  it('values far larger than a TCP chunk, both ways, and a large publish', async () => {
    const p = await proxy({ lossRate: 0 });
    const c = client(p.url);
    const big = new Random(3).bytes(6 * 1024 * 1024);
    expect(await c.set('big', big)).toBe('OK');
    expect((await c.getBuffer('big'))!.equals(big)).toBe(true);
    const { messages } = await subscriber(p.url, 'large');
    const payload = 'x'.repeat(2 * 1024 * 1024);
    expect(await c.publish('large', payload)).toBe(1);
    await waitFor(() => messages.length === 1, { what: 'the large message' });
    expect(messages[0]).toBe(payload);
  });
});

describe('lossy redis proxy, loss 1: silent bus loss', () => {
  it('the subscriber gets nothing, publish resolves 0, the connection stays up; the rate changes at runtime', async () => {
    const p = await proxy({ lossRate: 1 });
    const c = client(p.url);
    const direct = await subscriber(redis.url, 'bus');
    const proxied = await subscriber(p.url, 'bus');
    for (let i = 0; i < 50; i++) expect(await c.publish('bus', `m${i}`)).toBe(0);
    expect(await c.set('still', 'up')).toBe('OK');
    expect(await c.get('still')).toBe('up');
    expect(c.closes).toBe(0);
    expect(c.status).toBe('ready');
    expect(p.stats()).toMatchObject({ publishes: 50, forwarded: 0, dropped: 50 });

    p.lossRate = 0;
    expect(await c.publish('bus', 'after')).toBe(2);
    // Redis delivers a connection's publishes in order: once 'after' arrived, none of the 50 is on its way.
    await waitFor(() => direct.messages.length >= 1 && proxied.messages.length >= 1, { what: 'after' });
    expect(direct.messages).toEqual(['after']);
    expect(proxied.messages).toEqual(['after']);
    expect(() => {
      p.lossRate = 1.5;
    }).toThrow(RangeError);
  });

  it('drops only on channels that match the filter; SPUBLISH too', async () => {
    const p = await proxy({ lossRate: 1, channels: ':bus:' });
    const c = client(p.url);
    const bus = await subscriber(redis.url, 'wb:1:bus:mesh:a');
    const flags = await subscriber(redis.url, 'wb:1:flags:refresh:x');
    expect(await c.publish('wb:1:bus:mesh:a', 'lost')).toBe(0);
    expect(await c.publish('wb:1:flags:refresh:x', 'kept')).toBe(1);
    expect(await c.call('SPUBLISH', 'wb:1:bus:mesh:a', 'lost too')).toBe(0);
    await waitFor(() => flags.messages.length === 1, { what: 'the kept message' });
    expect(p.stats()).toMatchObject({ publishes: 3, forwarded: 1, dropped: 2 });
    // A sentinel on the same connection, once nothing is dropped: in order behind the lost one, had it gone.
    p.lossRate = 0;
    expect(await c.publish('wb:1:bus:mesh:a', 'sentinel')).toBe(1);
    await waitFor(() => bus.messages.length >= 1, { what: 'the sentinel' });
    expect(bus.messages).toEqual(['sentinel']);
  });
});

describe('lossy redis proxy, loss 0.3: seeded', () => {
  it('drops exactly the seeded share of 2,000 pipelined publishes; every other one arrives, in order', async () => {
    const seed = 20240611;
    const count = 2000;
    const p = await proxy({ lossRate: 0.3, seed });
    const c = client(p.url);
    const { messages } = await subscriber(redis.url, 'share');
    const replies = await Promise.all(Array.from({ length: count }, (_, i) => c.publish('share', `m${i}`)));
    const expected = drops(seed, 0.3, count);
    const droppedCount = expected.filter(Boolean).length;
    expect(droppedCount / count).toBeGreaterThan(0.27);
    expect(droppedCount / count).toBeLessThan(0.33);
    expect(replies).toEqual(expected.map((dropped) => (dropped ? 0 : 1)));
    const kept = expected.flatMap((dropped, i) => (dropped ? [] : [`m${i}`]));
    // A sentinel behind them on the same connection, once nothing is dropped: when it arrives, nothing more
    // of the 2,000 is on its way.
    p.lossRate = 0;
    expect(await c.publish('share', 'sentinel')).toBe(1);
    await waitFor(() => messages.at(-1) === 'sentinel', { what: 'every kept message, then the sentinel' });
    expect(messages).toEqual([...kept, 'sentinel']);
    expect(p.stats()).toMatchObject({
      publishes: count + 1,
      dropped: droppedCount,
      forwarded: count - droppedCount + 1,
    });
    expect(c.closes).toBe(0);
  });
});

describe('lossy redis proxy: replies stay in order', () => {
  it('a pipeline mixing SET, PUBLISH, GET, INCR: each reply where Redis would have put it', async () => {
    const seed = 7;
    const p = await proxy({ lossRate: 0.5, seed });
    const c = client(p.url);
    await subscriber(redis.url, 'mixed');
    const pipeline = c.pipeline();
    const expected: unknown[] = [];
    const fate = drops(seed, 0.5, 600);
    let publishes = 0;
    const publish = (m: string) => {
      pipeline.publish('mixed', m);
      expected.push(fate[publishes++] ? 0 : 1);
    };
    publish('first'); // a drop with nothing owed before it, when the seed says so
    for (let i = 0; i < 150; i++) {
      pipeline.set(`mk${i}`, `mv${i}`);
      expected.push('OK');
      publish(`a${i}`);
      publish(`b${i}`); // two publishes in a row: two replies of the proxy's own, maybe
      pipeline.get(`mk${i}`);
      expected.push(`mv${i}`);
      publish(`c${i}`);
      pipeline.incr('mixed-counter');
      expected.push(i + 1);
    }
    const results = await pipeline.exec();
    expect(results!.map(([error, value]) => error ?? value)).toEqual(expected);
    expect(fate.slice(0, publishes).some(Boolean) && fate.slice(0, publishes).some((d) => !d)).toBe(true);
  });

  it("waits for a blocked command's reply before answering the publish behind it; MULTI is never dropped", async () => {
    const p = await proxy({ lossRate: 1 });
    const c = client(p.url);
    await c.set('after', 'blpop');
    const started = Date.now();
    const results = await c.pipeline().blpop('empty-list', 0.3).publish('x', 'dropped').get('after').exec();
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(results!.map(([error, value]) => error ?? value)).toEqual([null, 0, 'blpop']);

    await subscriber(redis.url, 'tx');
    const tx = await c.multi().set('in-tx', '1').publish('tx', 'kept').get('in-tx').exec();
    expect(tx!.map(([error, value]) => error ?? value)).toEqual(['OK', 1, '1']);
    expect(await c.publish('tx', 'dropped again')).toBe(0);
    expect(p.stats()).toMatchObject({ publishes: 3, dropped: 2, forwarded: 1 });
  });

  it('inline commands and a pipeline written one byte at a time', async () => {
    const p = await proxy({ lossRate: 1 });
    const inlineReplies = ':0\r\n+PONG\r\n:0\r\n$2\r\naA\r\n';
    const inline = await raw(
      p.port,
      [Buffer.from('PUBLISH ch hello\r\nPING\r\n\r\nPUBLISH "c h" \'x y\'\nECHO "a\\x41"\r\n')],
      { ms: 5000, until: (text) => text.length >= inlineReplies.length },
    );
    expect(inline.text).toBe(inlineReplies);
    const pipeline = Buffer.concat([
      resp('PUBLISH', 'ch', 'one'),
      resp('SET', 'bytewise', 'v\r\n$3\r\n'),
      resp('PUBLISH', 'ch', Buffer.from([0, 13, 10])),
      resp('GET', 'bytewise'),
      Buffer.from('*0\r\n'),
      resp('PUBLISH', 'ch', 'three'),
    ]);
    const slowReplies = ':0\r\n+OK\r\n:0\r\n$7\r\nv\r\n$3\r\n\r\n:0\r\n';
    const slow = await raw(p.port, bytewise(pipeline), {
      apart: true,
      ms: 5000,
      until: (text) => text.length >= slowReplies.length,
    });
    expect(slow.text).toBe(slowReplies);
    expect(slow.closed).toBe(false);
    // A reply of the proxy's own still owed when the connection turns subscriber goes where it belongs.
    const subscribed = '+OK\r\n:0\r\n*3\r\n$9\r\nsubscribe\r\n$4\r\nu-ch\r\n:1\r\n';
    const subscribing = await raw(
      p.port,
      [Buffer.concat([resp('SET', 'u', '1'), resp('PUBLISH', 'ch', 'x'), resp('SUBSCRIBE', 'u-ch')])],
      { ms: 5000, until: (text) => text.length >= subscribed.length },
    );
    expect(subscribing.text).toBe(subscribed);
    expect(p.stats().untracked).toBe(1);
  });
});

describe('lossy redis proxy: malformed input and closing', () => {
  it('bytes it cannot parse go to Redis as they are; nothing crashes, other connections go on', async () => {
    const p = await proxy({ lossRate: 1 });
    const protocolError = { ms: 5000, until: (text: string) => /-ERR Protocol error.*\r\n/.test(text) };
    const bad = await raw(p.port, [resp('PUBLISH', 'ch', 'x'), Buffer.from('*abc\r\n')], protocolError);
    expect(bad.text).toMatch(/^:0\r\n-ERR Protocol error/);
    const dollar = await raw(p.port, [Buffer.from('*2\r\n$3\r\nGET\r\n+nope\r\n')], protocolError);
    expect(dollar.text).toMatch(/-ERR Protocol error: expected '\$'/);
    const quotes = await raw(p.port, [Buffer.from('PUBLISH "ch x\r\n')], protocolError);
    expect(quotes.text).toMatch(/-ERR Protocol error: unbalanced quotes/);
    const random = new Random(99);
    await Promise.all(
      Array.from({ length: 30 }, (_, i) => {
        const noise = random.bytes(random.int(1, 4000));
        const valid = resp('PUBLISH', 'ch', `m${i}`);
        // Noise alone, noise after valid commands, valid commands cut off in the middle.
        const writes = [
          [noise],
          [valid, valid, noise],
          [valid.subarray(0, random.int(1, valid.length - 1)), noise],
        ][i % 3]!;
        return raw(p.port, writes, { ms: 100 });
      }),
    );
    expect(p.stats().untracked).toBeGreaterThan(0);
    const c = client(p.url);
    expect(await c.set('after-noise', 'fine')).toBe('OK');
    expect(await c.publish('ch', 'x')).toBe(0);
    await waitFor(() => p.stats().open === 1, { what: 'noisy connections closed' });
  });

  it('many connections at once, each with its own order', async () => {
    const p = await proxy({ lossRate: 0.3, seed: 5 });
    const { messages } = await subscriber(redis.url, 'many');
    const many = Array.from({ length: 40 }, () => client(p.url));
    const results = await Promise.all(
      many.map(async (c, n) => {
        const pipeline = c.pipeline();
        for (let i = 0; i < 50; i++) pipeline.publish('many', `${n}:${i}`).set(`many:${n}`, String(i));
        pipeline.get(`many:${n}`);
        return (await pipeline.exec())!.map(([error, value]) => error ?? value);
      }),
    );
    for (const r of results) {
      expect(r.at(-1)).toBe('49');
      expect(r.filter((_, i) => i % 2 === 1 && i < 100)).toEqual(Array(50).fill('OK'));
      for (const published of r.filter((_, i) => i % 2 === 0 && i < 100)) expect([0, 1]).toContain(published);
    }
    const stats = p.stats();
    expect(stats.publishes).toBe(2000);
    expect(stats.dropped / stats.publishes).toBeGreaterThan(0.25);
    expect(stats.dropped / stats.publishes).toBeLessThan(0.35);
    await waitFor(() => messages.length >= stats.forwarded, { what: 'every forwarded publish' });
    expect(messages.length).toBe(stats.forwarded);
    const replied = results.flatMap((r) => r.filter((_, i) => i % 2 === 0 && i < 100));
    expect(replied.filter((v) => v === 1).length).toBe(stats.forwarded);
  });

  it('close ends every client and Redis connection and stops listening', async () => {
    const p = await proxy();
    const clientName = `proxied-${process.pid}`;
    const named = () => {
      const c = new Redis(p.url, { connectionName: clientName, retryStrategy: () => null }) as Redis & {
        closes: number;
      };
      c.closes = 0;
      c.on('close', () => c.closes++);
      c.on('error', () => {});
      clients.push(c);
      return c;
    };
    const a = named();
    const b = named();
    const s = named();
    await Promise.all([a.ping(), b.ping(), s.subscribe('closing')]);
    const direct = client(redis.url);
    const proxiedConnections = async () =>
      String(await direct.client('LIST'))
        .split('\n')
        .filter((line) => line.includes(`name=${clientName} `)).length;
    expect(await proxiedConnections()).toBe(3);
    await p.close();
    await waitFor(() => a.closes > 0 && b.closes > 0 && s.closes > 0, { what: 'clients closed' });
    expect(p.stats().open).toBe(0);
    await waitFor(async () => (await proxiedConnections()) === 0, { what: 'Redis connections closed' });
    const refused = await new Promise<boolean>((resolve) => {
      const s = connect(p.port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(false);
      });
      s.once('error', () => resolve(true));
    });
    expect(refused).toBe(true);
    await p.close(); // twice is fine
  });

  it('Redis going away closes the client side; the client reconnects through the proxy when it is back', async () => {
    const own = await ThrowawayRedis.start();
    try {
      const p = await proxy({ upstream: own.url });
      const c = new Redis(p.url, { retryStrategy: () => 50, maxRetriesPerRequest: 0 });
      clients.push(c);
      c.on('error', () => {});
      expect(await c.set('k', 'v')).toBe('OK');
      let closed = 0;
      c.on('close', () => closed++);
      await own.stop();
      await waitFor(() => closed > 0, { what: 'the client to see Redis gone' });
      await own.restart();
      await waitFor(async () => (await c.set('k', 'again').catch(() => undefined)) === 'OK', {
        what: 'a reconnect through the proxy',
      });
    } finally {
      await own.stop();
    }
  });
});

/** Records what a parser does, as a list of events (forwarded bytes merged), to compare two runs. */
function recorder(): { sink: RequestSink; events: () => string[] } {
  const events: Array<[string, Buffer[]]> = [];
  const add = (kind: string, bytes?: Buffer) => {
    const last = events.at(-1);
    if (kind === 'forward' && last?.[0] === 'forward') last[1].push(bytes!);
    else events.push([kind, bytes ? [bytes] : []]);
  };
  return {
    sink: {
      forward: (bytes) => add('forward', bytes),
      expectReply: () => add('expect'),
      fakeReply: (bytes) => add('fake', bytes),
      untracked: () => add('untracked'),
    },
    events: () =>
      events.map(([kind, parts]) =>
        parts.length ? `${kind} ${Buffer.concat(parts).toString('latin1')}` : kind,
      ),
  };
}

describe('the parsers, split at every byte', () => {
  const stream = Buffer.concat([
    resp('SET', 'a', Buffer.from('x\r\ny')),
    resp('PUBLISH', 'ch', 'drop me'),
    Buffer.from('GET a\r\n'),
    resp('PUBLISH', 'ch', 'keep me'),
    Buffer.from('*-1\r\n'),
    resp('MULTI'),
    resp('PUBLISH', 'ch', 'in multi'),
    resp('EXEC'),
    Buffer.from('\r\n'),
    resp('CLIENT', 'SETNAME', 'n'),
    resp('SUBSCRIBE', 'ch'),
    resp('PUBLISH', 'ch', 'after subscribe'),
  ]);

  function run(chunks: Buffer[]): string[] {
    const { sink, events } = recorder();
    let n = 0;
    const parser = new RequestParser(sink, (_channel, eligible) => eligible && n++ % 2 === 0);
    for (const chunk of chunks) parser.push(chunk);
    return events();
  }

  it('requests: the same forwards, replies owed and drops however the stream is cut', () => {
    const whole = run([stream]);
    const text = (...parts: Buffer[]) => Buffer.concat(parts).toString('latin1');
    expect(whole).toEqual([
      `forward ${text(resp('SET', 'a', Buffer.from('x\r\ny')))}`,
      'expect',
      'fake :0\r\n',
      'forward GET a\r\n',
      'expect',
      `forward ${text(resp('PUBLISH', 'ch', 'keep me'))}`,
      'expect',
      `forward ${text(Buffer.from('*-1\r\n'), resp('MULTI'))}`, // `*-1`: nothing owed
      'expect',
      `forward ${text(resp('PUBLISH', 'ch', 'in multi'))}`, // never dropped in a transaction
      'expect',
      `forward ${text(resp('EXEC'))}`,
      'expect',
      `forward ${text(Buffer.from('\r\n'), resp('CLIENT', 'SETNAME', 'n'))}`,
      'expect',
      `forward ${text(resp('SUBSCRIBE', 'ch'))}`,
      'untracked',
      `forward ${text(resp('PUBLISH', 'ch', 'after subscribe'))}`,
    ]);
    expect(run(bytewise(stream))).toEqual(whole);
    for (let cut = 1; cut < stream.length; cut += 3)
      expect(run([stream.subarray(0, cut), stream.subarray(cut)])).toEqual(whole);
  });

  it('replies: RESP2 and RESP3 frames counted where they end, pushes and attributes not', () => {
    const replies = Buffer.from(
      [
        '+OK\r\n',
        '$5\r\nx\r\ny\n\r\n',
        '$-1\r\n',
        '*2\r\n$1\r\na\r\n*1\r\n:1\r\n',
        '>3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n',
        '%1\r\n+k\r\n~2\r\n_\r\n#t\r\n',
        '|1\r\n+ttl\r\n:3\r\n,1.5\r\n',
        '*0\r\n',
        '-ERR x\r\n',
        '=7\r\ntxt:abc\r\n',
      ].join(''),
    );
    const ends = (chunks: Buffer[]) => {
      const scanner = new ReplyScanner();
      const found: string[] = [];
      let offset = 0;
      for (const chunk of chunks) {
        expect(
          scanner.scan(chunk, (end, counted) => {
            found.push(`${offset + end}${counted ? '' : ' push'}`);
            return true;
          }),
        ).toBe(true);
        offset += chunk.length;
      }
      expect(scanner.atBoundary).toBe(true);
      return found;
    };
    const whole = ends([replies]);
    expect(whole).toHaveLength(10);
    expect(whole.filter((e) => e.endsWith('push'))).toHaveLength(1);
    expect(ends(bytewise(replies))).toEqual(whole);
    expect(new ReplyScanner().scan(Buffer.from('hello\r\n'), () => true)).toBe(false);
  });

  it('inline arguments as Redis splits them', () => {
    const split = (s: string) => splitArgs(Buffer.from(s))?.map((b) => b.toString('latin1'));
    expect(split('  PUBLISH  ch   hello ')).toEqual(['PUBLISH', 'ch', 'hello']);
    expect(split('SET "a b" \'c d\' "\\x41\\n"')).toEqual(['SET', 'a b', 'c d', 'A\n']);
    expect(split('"unbalanced')).toBeUndefined();
    expect(split('"closed"x')).toBeUndefined();
    expect(split('')).toEqual([]);
  });
});

describe('publish loss: which publishes are lost', () => {
  const channel = (name: string) => Buffer.from(name);

  it('draws once per droppable publish, so one seed gives one sequence of fates', () => {
    const fates = (seed: number) => {
      const loss = new PublishLoss({ lossRate: 0.5, seed });
      return Array.from({ length: 64 }, () => loss.decide(channel('mesh:bus:m1'), true));
    };
    expect(fates(7)).toEqual(fates(7));
    expect(fates(7)).not.toEqual(fates(8));
    const dropped = fates(7).filter(Boolean).length;
    expect(dropped).toBeGreaterThan(10);
    expect(dropped).toBeLessThan(54);
  });

  it('never drops an ineligible publish (inside MULTI) or one on a channel the filter leaves out', () => {
    const loss = new PublishLoss({ lossRate: 1, channels: ':bus:' });
    expect(loss.decide(channel('mesh:bus:m1'), false)).toBe(false);
    expect(loss.decide(channel('mesh:flags'), true)).toBe(false);
    expect(loss.decide(channel('mesh:bus:m1'), true)).toBe(true);
    expect(loss.stats()).toEqual({ publishes: 3, forwarded: 2, dropped: 1 });
  });

  it('takes a pattern or a predicate as the channel filter, and a new rate at runtime', () => {
    const byPattern = new PublishLoss({ lossRate: 1, channels: /^a/ });
    expect([byPattern.decide(channel('ab'), true), byPattern.decide(channel('ba'), true)]).toEqual([
      true,
      false,
    ]);
    const byPredicate = new PublishLoss({ lossRate: 1, channels: (name) => name === 'x' });
    expect([byPredicate.decide(channel('x'), true), byPredicate.decide(channel('y'), true)]).toEqual([
      true,
      false,
    ]);
    byPredicate.lossRate = 0;
    expect(byPredicate.decide(channel('x'), true)).toBe(false);
  });

  it('refuses a rate outside 0 to 1', () => {
    expect(() => new PublishLoss({ lossRate: 1.5 })).toThrow(RangeError);
    expect(() => new PublishLoss({ lossRate: Number.NaN })).toThrow(RangeError);
    const loss = new PublishLoss({});
    expect(() => {
      loss.lossRate = -0.1;
    }).toThrow(RangeError);
  });
});
