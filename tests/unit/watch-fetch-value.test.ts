import { createHash } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ForbiddenTargetError } from '../../broker/watches/address-guard.js';
import {
  extractPath,
  type FetchOptions,
  fetchWatchValue,
  type NotifyOn,
  parseNotifyOn,
  shouldNotify,
  validateExtract,
} from '../../broker/watches/fetch-value.js';

const document = {
  data: { items: [{ price: 12.5, name: 'widget' }, { price: 3 }], status: 'ok', flag: true, none: null },
  zeta: { b: 2, a: [{ y: 1, x: 0 }] },
};
const bigBody = 'x'.repeat(10_000);

let server: Server;
let base: string;
let lastHeaders: IncomingHttpHeaders = {};

const local: FetchOptions = { timeoutMs: 2000, maxBytes: 4096, allowPrivate: true };

beforeAll(async () => {
  server = createServer((request, response) => {
    lastHeaders = request.headers;
    switch (request.url) {
      case '/json':
        response.setHeader('content-type', 'application/json');
        response.end(JSON.stringify(document));
        return;
      case '/text':
        response.end('hello, not json');
        return;
      case '/missing':
        response.statusCode = 404;
        response.end('{"error":"nope"}');
        return;
      case '/redirect':
        response.writeHead(302, { location: '/json' });
        response.end();
        return;
      case '/hang':
        return; // never answers; the client's deadline must fire
      case '/slow-body':
        response.write('{"partial":'); // headers and some body, then silence
        return;
      case '/big':
        response.end(bigBody);
        return;
      case '/big-chunked':
        response.write(bigBody.slice(0, 3000));
        response.write(bigBody.slice(3000));
        response.end();
        return;
      default:
        response.statusCode = 500;
        response.end();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

describe('fetchWatchValue', () => {
  it('hashes the raw body in hash mode and identifies itself', async () => {
    const value = await fetchWatchValue(`${base}/text`, 'hash', undefined, local);
    expect(value).toBe(createHash('sha256').update('hello, not json').digest('hex'));
    expect(lastHeaders['user-agent']).toBe('mesh-broker-watch/1');
  });

  it('returns the status code in status mode, without following redirects', async () => {
    expect(await fetchWatchValue(`${base}/json`, 'status', undefined, local)).toBe('200');
    expect(await fetchWatchValue(`${base}/missing`, 'status', undefined, local)).toBe('404');
    expect(await fetchWatchValue(`${base}/redirect`, 'status', undefined, local)).toBe('302');
  });

  it('treats non-2xx responses as errors in hash and json modes', async () => {
    await expect(fetchWatchValue(`${base}/missing`, 'json', undefined, local)).rejects.toThrow(
      'unexpected HTTP status 404',
    );
    await expect(fetchWatchValue(`${base}/redirect`, 'hash', undefined, local)).rejects.toThrow(
      'unexpected HTTP status 302',
    );
  });

  it('returns the whole document as canonical JSON with sorted keys', async () => {
    const value = await fetchWatchValue(`${base}/json`, 'json', undefined, local);
    expect(value.startsWith('{"data":{"flag":true,"items":[{"name":"widget","price":12.5}')).toBe(true);
    expect(value).toContain('"zeta":{"a":[{"x":0,"y":1}],"b":2}');
    expect(JSON.parse(value)).toEqual(document);
  });

  it.each([
    ['data.items.0.price', '12.5'],
    ['data.items[1].price', '3'],
    ['$.data.items[0].name', 'widget'],
    ['data.status', 'ok'],
    ['data.flag', 'true'],
    ['data.none', 'null'],
    ['zeta', '{"a":[{"x":0,"y":1}],"b":2}'],
    ['zeta.a', '[{"x":0,"y":1}]'],
  ])('extracts %s', async (path, expected) => {
    expect(await fetchWatchValue(`${base}/json`, 'json', path, local)).toBe(expected);
  });

  it('reports a missing extract path', async () => {
    await expect(fetchWatchValue(`${base}/json`, 'json', 'data.items.5.price', local)).rejects.toThrow(
      'extract path "data.items.5.price" not found',
    );
  });

  it('reports a body that is not JSON', async () => {
    await expect(fetchWatchValue(`${base}/text`, 'json', undefined, local)).rejects.toThrow(
      'response is not JSON',
    );
  });

  it('gives up on a server that never answers', async () => {
    const started = Date.now();
    await expect(
      fetchWatchValue(`${base}/hang`, 'status', undefined, { ...local, timeoutMs: 200 }),
    ).rejects.toThrow('timed out after 200 ms');
    expect(Date.now() - started).toBeLessThan(1500);
  });

  it('counts the body against the deadline too', async () => {
    await expect(
      fetchWatchValue(`${base}/slow-body`, 'json', undefined, { ...local, timeoutMs: 200 }),
    ).rejects.toThrow('timed out after 200 ms');
  });

  it('refuses bodies above maxBytes, declared or streamed', async () => {
    const small = { ...local, maxBytes: 1000 };
    await expect(fetchWatchValue(`${base}/big`, 'hash', undefined, small)).rejects.toThrow(
      'response larger than 1000 bytes',
    );
    await expect(fetchWatchValue(`${base}/big-chunked`, 'hash', undefined, small)).rejects.toThrow(
      'response larger than 1000 bytes',
    );
    const roomy = await fetchWatchValue(`${base}/big-chunked`, 'hash', undefined, {
      ...local,
      maxBytes: 20_000,
    });
    expect(roomy).toBe(createHash('sha256').update(bigBody).digest('hex'));
  });

  it('refuses loopback through the lookup hook when private targets are not allowed', async () => {
    const port = (server.address() as AddressInfo).port;
    const attempt = fetchWatchValue(`http://localhost:${port}/json`, 'status', undefined, {
      ...local,
      allowPrivate: false,
    });
    await expect(attempt).rejects.toBeInstanceOf(ForbiddenTargetError);
    await expect(attempt).rejects.toThrow(/watch target localhost resolves to .*loopback/);
  });

  it('refuses a literal loopback address, which never reaches the lookup hook', async () => {
    const attempt = fetchWatchValue(`${base}/json`, 'status', undefined, { ...local, allowPrivate: false });
    await expect(attempt).rejects.toBeInstanceOf(ForbiddenTargetError);
    await expect(attempt).rejects.toThrow('watch target 127.0.0.1 is a loopback address');
  });

  it('rejects unsupported schemes before connecting', async () => {
    await expect(fetchWatchValue('file:///etc/passwd', 'hash', undefined, local)).rejects.toThrow(
      'scheme file: is not allowed',
    );
  });
});

describe('extractPath', () => {
  it('walks objects and arrays in dot and bracket form', () => {
    expect(extractPath(document, 'data.items.1.price')).toBe(3);
    expect(extractPath(document, 'data.items[0]')).toEqual({ price: 12.5, name: 'widget' });
    expect(extractPath([[1, [2, 3]]], '[0][1][1]')).toBe(3);
    expect(extractPath([[1, [2, 3]]], '$[0][1].0')).toBe(2);
    expect(extractPath(document, '$')).toBe(document);
    expect(extractPath({ '0': 'zero' }, '0')).toBe('zero');
  });

  it.each([
    ['data.nope'],
    ['data.items.2'],
    ['data.items.first'],
    ['data.status.length'],
    ['data.none.x'],
    ['constructor'],
    ['__proto__'],
  ])('throws on the missing step in %s', (path) => {
    expect(() => extractPath(document, path)).toThrow(`extract path "${path}" not found`);
  });
});

describe('validateExtract', () => {
  it.each(['a', 'a.b.c', 'items.0.price', 'items[0].price', '$.a', '$', '$[2]', 'a[0][1]', 'with space.x'])(
    'accepts %s',
    (path) => {
      expect(validateExtract(path)).toBeUndefined();
    },
  );

  it.each([
    ['', 'is empty'],
    ['$.', 'is empty'],
    ['a..b', 'empty segment'],
    ['.a', 'empty segment'],
    ['a.', 'empty segment'],
    ['a[x]', 'malformed index'],
    ['a[0', 'malformed index'],
    ['a]0', 'malformed index'],
    ['a[-1]', 'malformed index'],
    ['$a', 'must continue with "."'],
  ])('rejects %j (%s)', (path, message) => {
    expect(validateExtract(path)).toContain(message);
  });
});

describe('parseNotifyOn', () => {
  it('parses the three forms', () => {
    expect(parseNotifyOn(undefined)).toEqual({ kind: 'change' });
    expect(parseNotifyOn('change')).toEqual({ kind: 'change' });
    expect(parseNotifyOn('match:200')).toEqual({ kind: 'match', value: '200' });
    expect(parseNotifyOn('not_match:ok')).toEqual({ kind: 'not_match', value: 'ok' });
    expect(parseNotifyOn('match:a:b:c')).toEqual({ kind: 'match', value: 'a:b:c' });
    expect(parseNotifyOn('not_match::')).toEqual({ kind: 'not_match', value: ':' });
  });

  it.each([
    ['match:', 'needs a value'],
    ['not_match:', 'needs a value'],
    ['', 'notifyOn must be'],
    ['changes', 'notifyOn must be'],
    ['Match:x', 'notifyOn must be'],
    ['equals:x', 'notifyOn must be'],
  ])('rejects %j', (text, message) => {
    expect(() => parseNotifyOn(text)).toThrow(message);
  });
});

describe('shouldNotify', () => {
  const change: NotifyOn = { kind: 'change' };
  const match: NotifyOn = { kind: 'match', value: 'X' };
  const notMatch: NotifyOn = { kind: 'not_match', value: 'X' };

  it.each([
    [change, undefined, 'X', false],
    [change, 'X', 'X', false],
    [change, 'X', 'Y', true],
    [change, 'Y', 'X', true],
    [match, undefined, 'X', true],
    [match, undefined, 'Y', false],
    [match, 'Y', 'X', true],
    [match, 'X', 'X', false],
    [match, 'X', 'Y', false],
    [match, 'Y', 'Z', false],
    [notMatch, undefined, 'Y', true],
    [notMatch, undefined, 'X', false],
    [notMatch, 'X', 'Y', true],
    [notMatch, 'Y', 'Z', false],
    [notMatch, 'Y', 'X', false],
    [notMatch, 'X', 'X', false],
  ] as const)('%j from %j to %j → %j', (rule, previous, current, expected) => {
    expect(shouldNotify(rule, previous, current)).toBe(expected);
  });
});
