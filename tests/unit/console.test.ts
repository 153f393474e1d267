import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateMemberKeys, signHello } from '@mesh-broker/sdk';
import { signHello as signHelloWebCrypto } from '@mesh-broker/sdk/browser';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { BadFlipRequest, type FlipRequest, parseFlipRequest } from '../../cli/console/flag-flip.js';
import { clusterSample, RateHistory, Ring } from '../../cli/console/history.js';
import { histogramQuantile, RateTracker, sumCounters, sumHistogram } from '../../cli/console/rates.js';
import { changesState, crossOriginRefusal } from '../../cli/console/same-origin.js';
import { type ConsoleServer, startConsoleServer } from '../../cli/console/server.js';
import { type TimelineRow, toTimelineEntry } from '../../cli/console/timeline.js';
import { consoleUrlFile, removeConsoleUrl, writeConsoleUrl } from '../../cli/console/url-file.js';

const METRICS = `# HELP mesh_broker_deliveries_total Deliveries
# TYPE mesh_broker_deliveries_total counter
mesh_broker_deliveries_total{node="b1",path="local"} 3
mesh_broker_deliveries_total{node="b1",path="remote"} 4
mesh_broker_messages_accepted_total{node="b1"} 10
mesh_broker_messages_accepted_total_other{node="b1"} 99
mesh_broker_stream_publishes_total{node="b1",note="a } b"} 2
`;

describe('console: message rates from /metrics', () => {
  it('sums every series of a family, and nothing of a family that only starts with its name', () => {
    const sums = sumCounters(METRICS, [
      'mesh_broker_deliveries_total',
      'mesh_broker_messages_accepted_total',
      'mesh_broker_stream_publishes_total',
      'mesh_broker_absent_total',
    ]);
    expect(Object.fromEntries(sums)).toEqual({
      mesh_broker_deliveries_total: 7,
      mesh_broker_messages_accepted_total: 10,
      mesh_broker_stream_publishes_total: 2,
      mesh_broker_absent_total: 0,
    });
  });

  it('a rate is the increase between two scrapes per second; a counter that went down restarted', () => {
    const tracker = new RateTracker();
    expect(tracker.observe('b1', METRICS, 1000)).toBeUndefined();
    const later = METRICS.replace('} 10', '} 30');
    expect(tracker.observe('b1', later, 3000)?.rates).toEqual({
      accepted: 10,
      delivered: 0,
      streamPublishes: 0,
    });
    const restarted = later.replace('} 30', '} 4');
    expect(tracker.observe('b1', restarted, 4000)?.rates.accepted).toBe(4);
    tracker.forget('b1');
    expect(tracker.observe('b1', restarted, 5000)).toBeUndefined();
  });
});

/** A fan-out histogram as a node exposes it: `kind` series, cumulative buckets. */
function fanoutMetrics(
  counts: { message: number[]; stream: number[] },
  sums: { message: number; stream: number },
) {
  const bounds = ['0.001', '0.01', '0.1', '+Inf'];
  const lines = ['# TYPE mesh_broker_fanout_latency_seconds histogram'];
  for (const kind of ['message', 'stream'] as const) {
    bounds.forEach((le, i) => {
      lines.push(
        `mesh_broker_fanout_latency_seconds_bucket{le="${le}",kind="${kind}",node="b1"} ${counts[kind][i]}`,
      );
    });
    lines.push(`mesh_broker_fanout_latency_seconds_sum{kind="${kind}",node="b1"} ${sums[kind]}`);
    lines.push(`mesh_broker_fanout_latency_seconds_count{kind="${kind}",node="b1"} ${counts[kind].at(-1)}`);
  }
  return `${lines.join('\n')}\n`;
}

describe('console: fan-out latency from the histogram', () => {
  it('sums the buckets of every kind by bound, with _sum and _count', () => {
    const histogram = sumHistogram(
      fanoutMetrics({ message: [1, 3, 4, 4], stream: [0, 1, 1, 2] }, { message: 0.05, stream: 1.5 }),
      'mesh_broker_fanout_latency_seconds',
    );
    expect(histogram.count).toBe(6);
    expect(histogram.sum).toBeCloseTo(1.55);
    expect([...histogram.buckets]).toEqual([
      [0.001, 1],
      [0.01, 4],
      [0.1, 5],
      [Number.POSITIVE_INFINITY, 6],
    ]);
  });

  it('estimates a quantile as histogram_quantile does: linear in its bucket, the top finite bound in +Inf', () => {
    const of = (buckets: [number, number][]) => ({
      count: buckets.at(-1)![1],
      sum: 0,
      buckets: new Map(buckets),
    });
    // 10 in (0, 0.01], 10 in (0.01, 0.1]: the median is the top of the first bucket, p75 halfway up the second.
    const h = of([
      [0.01, 10],
      [0.1, 20],
      [Number.POSITIVE_INFINITY, 20],
    ]);
    expect(histogramQuantile(0.5, h)).toBeCloseTo(0.01);
    expect(histogramQuantile(0.75, h)).toBeCloseTo(0.055);
    expect(
      histogramQuantile(
        0.95,
        of([
          [0.01, 1],
          [Number.POSITIVE_INFINITY, 10],
        ]),
      ),
    ).toBe(0.01);
    expect(histogramQuantile(0.95, { count: 0, sum: 0, buckets: new Map() })).toBeUndefined();
  });

  it("an interval's latencies are the histogram's increase; a node's and the cluster's sample", () => {
    const tracker = new RateTracker();
    const family = { message: [0, 0, 0, 0], stream: [0, 0, 0, 0] };
    tracker.observe('b1', METRICS + fanoutMetrics(family, { message: 0, stream: 0 }), 1000);
    // In one second: 4 message deliveries of 5 ms each (all in the (0.001, 0.01] bucket).
    const after = fanoutMetrics(
      { message: [0, 4, 4, 4], stream: [0, 0, 0, 0] },
      { message: 0.02, stream: 0 },
    );
    const interval = tracker.observe('b1', METRICS + after, 2000)!;
    expect(interval.fanout.count).toBe(4);
    const sample = clusterSample(2000, [interval, undefined]);
    expect(sample).toEqual({ at: 2000, accepted: 0, delivered: 0, fanoutP95Ms: 9.55, fanoutMeanMs: 5 });
    // No node measured anything yet (first scrapes): a gap, not a zero.
    expect(clusterSample(1000, [undefined, undefined])).toEqual({
      at: 1000,
      accepted: null,
      delivered: null,
      fanoutP95Ms: null,
      fanoutMeanMs: null,
    });
  });
});

describe('console: the bounded rate history', () => {
  it('a ring keeps the newest `capacity` items, oldest first', () => {
    const ring = new Ring<number>(3);
    for (const n of [1, 2]) ring.push(n);
    expect(ring.toArray()).toEqual([1, 2]);
    for (const n of [3, 4, 5]) ring.push(n);
    expect(ring.toArray()).toEqual([3, 4, 5]);
    expect(() => new Ring(0)).toThrow('a ring needs a capacity ≥ 1, got 0');
  });

  it('the history says its window and hands its series column by column', () => {
    const history = new RateHistory(2, 1000);
    const sample = (at: number, accepted: number | null) => ({
      at,
      accepted,
      delivered: 1,
      fanoutP95Ms: null,
      fanoutMeanMs: null,
    });
    for (const at of [1, 2, 3]) history.add(sample(at * 1000, at === 2 ? null : at));
    expect(history.view()).toEqual({
      windowSeconds: 2,
      intervalMs: 1000,
      at: [2000, 3000],
      accepted: [null, 3],
      delivered: [1, 1],
      fanoutP95Ms: [null, null],
      fanoutMeanMs: [null, null],
    });
  });
});

describe('console: timeline entries from the records', () => {
  const at = new Date('2025-01-02T03:04:05.678Z');
  const row = (over: Partial<TimelineRow>): TimelineRow => ({
    source: 'audit',
    id: '7',
    at,
    eventType: 'flag.changed',
    actor: 'console:ana',
    payload: {},
    ...over,
  });

  it('a flag change says the flag, from and to, and who', () => {
    expect(
      toTimelineEntry(row({ payload: { environment: 'phase3', flag: 'ha.clock', from: true, to: false } })),
    ).toEqual({
      id: 'audit:7',
      at: '2025-01-02T03:04:05.678Z',
      kind: 'flag',
      who: 'console:ana',
      what: 'ha.clock on → off',
      outcome: 'changed, audited',
      ok: true,
    });
  });

  it.each([
    ['promotion.promoted', {}, 'promotion phase 2 → 3', 'promoted', true],
    [
      'promotion.blocked',
      { reason: 'already at phase 3' },
      'promotion phase 2 → 3',
      'blocked: already at phase 3',
      false,
    ],
    [
      'promotion.rolled-back',
      { reason: 'no DM arrived', failedCheck: 'cross-node-dm' },
      'promotion phase 2 → 3',
      'rolled-back: no DM arrived; check cross-node-dm',
      false,
    ],
    ['promotion.rollback', {}, 'rollback phase 2 → 3', 'rollback', true],
  ])('%s', (eventType, extra, what, outcome, ok) => {
    const entry = toTimelineEntry(row({ eventType, actor: 'rm', payload: { from: 2, to: 3, ...extra } }));
    expect(entry).toMatchObject({ kind: 'promotion', who: 'rm', what, outcome, ok });
  });

  it('a smoke run counts its checks and names the first that failed', () => {
    const smoke = (payload: Record<string, unknown>) =>
      toTimelineEntry(row({ source: 'smoke', id: '3', eventType: 'smoke.run', actor: null, payload }));
    expect(smoke({ phase: 3, passed: true, checks: 16, met: 16, firstFailed: null })).toMatchObject({
      id: 'smoke:3',
      kind: 'smoke',
      who: null,
      what: 'phase 3 smoke checks',
      outcome: 'passed: 16/16 checks met',
      ok: true,
    });
    expect(
      smoke({ phase: 2, passed: false, checks: 16, met: 15, firstFailed: 'cross-node-dm' }).outcome,
    ).toBe('failed: 15/16 checks met, first: cross-node-dm');
  });
});

describe('console: the flag flip request', () => {
  it('accepts a known flag and a boolean', () => {
    expect(parseFlipRequest('{"flag":"ha.clock","value":false}')).toEqual({ flag: 'ha.clock', value: false });
  });

  it.each([
    ['not json', 'the body must be JSON'],
    ['[1]', 'must be a JSON object'],
    ['{"flag":"ha.clok","value":true}', 'unknown flag "ha.clok"; known flags: ha.presence'],
    ['{"flag":"ha.clock","value":"on"}', '"value" must be true or false, got "on"'],
    ['{"flag":"ha.clock"}', '"value" must be true or false, got nothing'],
    ['{"flag":"ha.clock","value":true,"env":"prod"}', 'unexpected field "env"'],
  ])('refuses %s', (body, message) => {
    expect(() => parseFlipRequest(body)).toThrow(BadFlipRequest);
    expect(() => parseFlipRequest(body)).toThrow(message);
  });
});

describe('the SDK keys module for browsers (WebCrypto)', () => {
  it('signs a hello exactly as the node:crypto module does (ed25519 is deterministic)', async () => {
    const keys = generateMemberKeys();
    const at = { ts: 1_700_000_000_000, nonce: '00112233445566778899aabbccddeeff' };
    const meshId = '11111111-2222-3333-4444-555555555555';
    expect(await signHelloWebCrypto(keys, meshId, 'session-1', at)).toEqual(
      signHello(keys, meshId, 'session-1', at),
    );
    const fresh = await signHelloWebCrypto(keys, meshId, 'session-1');
    expect(fresh.nonce).toMatch(/^[0-9a-f]{32}$/);
    await expect(signHelloWebCrypto({ ...keys, secretKey: 'xyz' }, meshId, 's')).rejects.toThrow(
      'secretKey must be 32 bytes',
    );
  });
});

describe('console: only its own origin may change state (cross-site requests from other loopback ports)', () => {
  const own = ['http://127.0.0.1:8090', 'http://localhost:8090'];

  it('reads are free; every other method changes state', () => {
    expect(['GET', 'HEAD', 'get'].map(changesState)).toEqual([false, false, false]);
    expect(['POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'].map(changesState)).toEqual([
      true,
      true,
      true,
      true,
      true,
    ]);
  });

  it.each([
    ['its own Origin', { origin: 'http://127.0.0.1:8090' }],
    ['its localhost Origin', { origin: 'http://localhost:8090' }],
    ['no Origin but Sec-Fetch-Site: same-origin', { 'sec-fetch-site': 'same-origin' }],
    ['no Origin but its own Referer', { referer: 'http://127.0.0.1:8090/?key=k' }],
  ])('lets a cookie request with %s through', (_, headers) => {
    expect(crossOriginRefusal(headers, own, 'cookie')).toBeUndefined();
  });

  it.each([
    ['another loopback port', { origin: 'http://127.0.0.1:3000' }, 'comes from http://127.0.0.1:3000'],
    ['an opaque origin (sandboxed frame, file:)', { origin: 'null' }, 'comes from null'],
    ['https on its port', { origin: 'https://127.0.0.1:8090' }, 'comes from https://127.0.0.1:8090'],
    ['a same-site fetch without Origin', { 'sec-fetch-site': 'same-site' }, 'Sec-Fetch-Site: same-site'],
    ['a Referer from another port', { referer: 'http://127.0.0.1:3000/evil' }, 'http://127.0.0.1:3000'],
    ['a Referer that is no URL', { referer: 'nonsense' }, 'an unreadable Referer'],
    ['none of the three headers', {}, 'needs an Origin header naming the console'],
  ])('refuses a cookie request from %s', (_, headers, message) => {
    expect(crossOriginRefusal(headers, own, 'cookie')).toContain(message);
  });

  it('a script with the admin token may send no Origin, but one it sends must be the console', () => {
    expect(crossOriginRefusal({}, own, 'admin-token')).toBeUndefined();
    expect(crossOriginRefusal({ origin: 'http://127.0.0.1:3000' }, own, 'admin-token')).toContain(
      'not from the console',
    );
    expect(crossOriginRefusal({ 'sec-fetch-site': 'cross-site' }, own, 'admin-token')).toContain(
      'cross-site',
    );
  });
});

describe('console server: a flip from another loopback origin with the key cookie (in process)', () => {
  let server: ConsoleServer;
  const flips: FlipRequest[] = [];
  const key = 'the-console-key';
  const adminToken = 'the-admin-token';

  beforeAll(async () => {
    server = await startConsoleServer({
      adminToken,
      key,
      snapshot: () => undefined,
      flip: async (request) => {
        flips.push(request);
        return { ...request, previous: !request.value, audited: true, pushedTo: 1 };
      },
    });
  });
  afterAll(() => server?.close());

  const post = (headers: Record<string, string>, body = '{"flag":"ha.audit","value":false}') =>
    fetch(`${server.url}/api/flags`, { method: 'POST', headers, body });
  const cookie = `wb_console_key=${key}`;

  it('a text/plain POST from http://127.0.0.1:<other port> (no preflight needed) is a 403 and flips nothing', async () => {
    const response = await post({ cookie, origin: 'http://127.0.0.1:3000', 'content-type': 'text/plain' });
    expect(response.status).toBe(403);
    const body = (await response.json()) as { error: string; message: string };
    expect(body.error).toBe('cross_origin');
    expect(body.message).toContain('comes from http://127.0.0.1:3000, not from the console');
    expect(flips).toEqual([]);
  });

  it('a cookie POST with no Origin, Sec-Fetch-Site or Referer is a 403; with its own Origin it flips', async () => {
    expect((await post({ cookie })).status).toBe(403);
    expect((await post({ cookie, 'sec-fetch-site': 'same-site' })).status).toBe(403);
    expect(flips).toEqual([]);
    const own = await post({ cookie, origin: server.url, 'content-type': 'application/json' });
    expect(own.status).toBe(200);
    expect(flips).toEqual([{ flag: 'ha.audit', value: false }]);
  });

  it('a script with the admin token and no Origin still flips; with a foreign Origin it is refused', async () => {
    flips.length = 0;
    expect((await post({ authorization: `Bearer ${adminToken}` })).status).toBe(200);
    const foreign = await post({ authorization: `Bearer ${adminToken}`, origin: 'http://localhost:3000' });
    expect(foreign.status).toBe(403);
    expect(flips).toHaveLength(1);
  });

  it('no page may frame the console (its flip buttons clicked through a decoy)', async () => {
    const page = await fetch(`${server.url}/?key=${key}`);
    expect(page.status).toBe(200);
    expect(page.headers.get('x-frame-options')).toBe('DENY');
    expect(page.headers.get('content-security-policy')).toBe("frame-ancestors 'none'");
    expect(page.headers.get('referrer-policy')).toBe('same-origin');
  });
});

describe('console: its URL with the key is written for the owner only', () => {
  let cwd: string;
  beforeEach(() => {
    cwd = mkdtempSync(join(tmpdir(), 'wb-console-url-'));
  });
  afterEach(() => rmSync(cwd, { recursive: true, force: true }));

  const mode = (path: string) => statSync(path).mode & 0o777;

  it('.workbench/console.url is 0600 in a 0700 folder, even over an older 0755 folder and 0644 file', () => {
    const dir = join(cwd, '.workbench');
    mkdirSync(join(dir, 'logs'), { recursive: true, mode: 0o755 });
    chmodSync(dir, 0o755);
    writeFileSync(consoleUrlFile(cwd), 'stale\n', { mode: 0o644 });
    const url = 'http://127.0.0.1:8090/?key=k1';
    const path = writeConsoleUrl(url, cwd);
    expect(readFileSync(path, 'utf8')).toBe(`${url}\n`);
    expect(mode(path)).toBe(0o600);
    for (const folder of [dir, join(dir, 'logs'), join(dir, 'flags')]) expect(mode(folder)).toBe(0o700);
  });

  it('is removed when its console stops, unless a later console wrote its own', () => {
    writeConsoleUrl('http://127.0.0.1:1/?key=first', cwd);
    writeConsoleUrl('http://127.0.0.1:2/?key=second', cwd);
    removeConsoleUrl('http://127.0.0.1:1/?key=first', cwd);
    expect(readFileSync(consoleUrlFile(cwd), 'utf8')).toContain('second');
    removeConsoleUrl('http://127.0.0.1:2/?key=second', cwd);
    expect(existsSync(consoleUrlFile(cwd))).toBe(false);
  });
});
