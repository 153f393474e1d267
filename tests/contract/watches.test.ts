/**
 * Contract of `WatchRunner` (broker/watches/runner.ts), against LocalWatchRunner (one node, `ha.watches`
 * off) and SharedWatchRunner (two nodes, on): a watch is polled every `intervalSec`, the first poll at once
 * setting the baseline; a poll whose value satisfies `notifyOn` becomes one durable `watch.triggered` to
 * the creating member; a failed poll is recorded (`lastError`) and notifies nothing; a watch deleted
 * through a node is polled no more; and polling (and notifying exactly when the value satisfies
 * `notifyOn`) goes on while the flag is flipped there and back twice.
 *
 * The targets are this test's own HTTP server (WATCH_ALLOW_PRIVATE=true), which records every poll.
 */
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { MeshClient } from '@mesh-broker/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Frame, WatchInfo, WatchTriggered } from '../../protocol/frames.js';
import { waitFor } from '../helpers/wait.js';
import { flipSequence, useWorld, WORLDS } from './harness.js';

const INTERVAL_SEC = 5; // the protocol's minimum
/** The node defaults: a burst of 10, then 60 a minute (a 10 s burst window). */
const SEND_BURST = 10;
const MAX_BODY_BYTES = 32 * 1024;

/** The test's web site: `/<name>` answers `{"state": <value>}` (or `status`); every request is logged. */
const site = {
  values: new Map<string, string>(),
  statuses: new Map<string, number>(),
  hits: new Map<string, number[]>(),
  set(path: string, value: string) {
    this.values.set(path, value);
  },
  polls(path: string): number[] {
    return this.hits.get(path) ?? [];
  },
};
let server: Server;
let base = '';

beforeAll(async () => {
  server = createServer((request, response) => {
    const path = request.url ?? '/';
    site.hits.set(path, [...site.polls(path), Date.now()]);
    response
      .writeHead(site.statuses.get(path) ?? 200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ state: site.values.get(path) ?? 'none' }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

type Listed = Frame & { watches: WatchInfo[] };

describe.each(WORLDS)('WatchRunner contract, %s', (kind) => {
  const world = useWorld(kind, {
    flag: 'ha.watches',
    env: { WATCH_ALLOW_PRIVATE: 'true', WATCH_FETCH_TIMEOUT_MS: '2000', PRESENCE_GRACE_MS: '600' },
  });
  let serial = 0;
  /** A fresh path of the site with its first value. */
  const path = (value: string) => {
    const name = `/${kind}-${++serial}`;
    site.set(name, value);
    return name;
  };
  const create = (client: MeshClient, target: string, fields: object = {}) =>
    client.request<Frame & { watchId: string }>({
      type: 'watch.create',
      url: `${base}${target}`,
      mode: 'json',
      extract: 'state',
      intervalSec: INTERVAL_SEC,
      ...fields,
    });
  const watch = async (client: MeshClient, watchId: string) =>
    (await client.request<Listed>({ type: 'watch.list' })).watches.find((w) => w.watchId === watchId);
  /** Watches outlive their sessions with `ha.watches`: each test deletes its own. */
  const remove = async (client: MeshClient, ...watchIds: string[]) => {
    for (const watchId of watchIds) await client.request({ type: 'watch.delete', watchId }).catch(() => {});
  };
  const triggered = (client: MeshClient) => {
    const seen: WatchTriggered[] = [];
    client.on('watch.triggered', (t) => seen.push(t));
    return seen;
  };

  it('polled every intervalSec, the first poll at once (the baseline); a change becomes one durable watch.triggered to the creating member; deleted through any node, polled no more', async () => {
    const mesh = await world.mesh(1);
    const creator = await world.peer(world.a, mesh, mesh.members[0]!, { autoAck: false });
    const otherSession = await world.peer(world.b, mesh, mesh.members[0]!);
    const seen = triggered(creator);
    const deletedPath = path('same');
    const changingPath = path('v1');
    const steadyPath = path('same');
    // Created first: its second poll would come before the others'.
    const doomed = await create(creator, deletedPath, { notifyOn: 'change' });
    const changing = await create(creator, changingPath, { notifyOn: 'change' });
    const steady = await create(creator, steadyPath, { notifyOn: 'change' });
    try {
      await waitFor(() => [deletedPath, changingPath, steadyPath].every((p) => site.polls(p).length >= 1), {
        timeoutMs: 3000,
        what: 'the first polls, at once',
      });
      expect(await otherSession.request({ type: 'watch.delete', watchId: doomed.watchId })).toMatchObject({
        type: 'watch.deleted',
      });
      expect(await watch(creator, doomed.watchId)).toBeUndefined();
      await waitFor(async () => (await watch(creator, changing.watchId))?.lastValue === 'v1', {
        what: 'the baseline',
      });
      site.set(changingPath, 'v2');
      // Until each live watch had its poll one interval after its first.
      const due = (p: string) =>
        site.polls(p).some((at) => at >= site.polls(p)[0]! + INTERVAL_SEC * 1000 - 100);
      await waitFor(() => due(changingPath) && due(steadyPath), {
        timeoutMs: INTERVAL_SEC * 1000 + 3000,
        intervalMs: 100,
        what: 'the polls one interval later',
      });
      await waitFor(() => seen.length >= 1, { timeoutMs: 2000, what: 'the change' });
      const problems: string[] = [];
      for (const [name, p] of [
        ['changing', changingPath],
        ['steady', steadyPath],
      ] as const) {
        const [first, second] = site.polls(p);
        const gap = second! - first!;
        if (gap < INTERVAL_SEC * 1000 - 100 || gap > INTERVAL_SEC * 1000 + 2000)
          problems.push(
            `${name}: polled again ${gap} ms after its first poll (interval ${INTERVAL_SEC * 1000} ms)`,
          );
      }
      // The deleted watch's second poll was due first: it never came.
      if (site.polls(deletedPath).length !== 1)
        problems.push(`deleted watch polled ${site.polls(deletedPath).length} times`);
      expect(problems).toEqual([]);
      expect(seen).toEqual([
        expect.objectContaining({
          type: 'watch.triggered',
          watchId: changing.watchId,
          url: `${base}${changingPath}`,
          oldValue: 'v1',
          newValue: 'v2',
        }),
      ]);
      // Durable, for the member: unacked, a new session of the member (on the other node) gets it.
      const later = await world.peer(world.b, mesh, mesh.members[0]!);
      const replayed = triggered(later);
      await waitFor(() => replayed.length === 1);
      expect(replayed[0]).toMatchObject({
        watchId: changing.watchId,
        newValue: 'v2',
        messageId: seen[0]!.messageId,
      });
      // A notification's messageId is a message's: row id and random tag (docs/protocol.md § Message identity).
      expect(seen[0]!.messageId).toMatch(/^[1-9]\d*-[0-9a-f]{16}$/);
    } finally {
      await remove(creator, changing.watchId, steady.watchId);
    }
  }, 30_000);

  it('a match on the first poll notifies at once; a failed poll is recorded in lastError and notifies nothing', async () => {
    const mesh = await world.mesh(1);
    const creator = await world.peer(world.a, mesh, mesh.members[0]!);
    const seen = triggered(creator);
    const brokenPath = path('ready');
    site.statuses.set(brokenPath, 500);
    const readyPath = path('ready');
    const broken = await create(creator, brokenPath, { notifyOn: 'match:ready' });
    const ready = await create(creator, readyPath, { notifyOn: 'match:ready' });
    await waitFor(() => seen.length === 1, { timeoutMs: 3000, what: 'the first-poll match' });
    expect(seen[0]).toMatchObject({ watchId: ready.watchId, oldValue: null, newValue: 'ready' });
    const failed = await waitFor(
      async () => {
        const info = await watch(creator, broken.watchId);
        return info?.lastCheckedAt ? info : undefined;
      },
      { what: 'the failed poll recorded' },
    );
    expect(failed.lastError).toMatch(/500/);
    expect(failed.lastValue).toBeNull();
    expect((await watch(creator, ready.watchId))?.lastError).toBeNull();
    expect(seen.map((t) => t.watchId)).toEqual([ready.watchId]);
    await remove(creator, broken.watchId, ready.watchId);
  });

  it('a notification is at most MAX_BODY_BYTES: a value too large is carried as its sha256, its size and an excerpt', async () => {
    const mesh = await world.mesh(1);
    const creator = await world.peer(world.a, mesh, mesh.members[0]!);
    const seen = triggered(creator);
    const big = 'v'.repeat(200 * 1024);
    const created = await create(creator, path(big), { notifyOn: 'not_match:small' });
    try {
      await waitFor(() => seen.length === 1, { timeoutMs: 5000, what: 'the first-poll notification' });
      expect(seen[0]!.newValue).toEqual({
        sha256: createHash('sha256').update(big).digest('hex'),
        bytes: big.length,
        excerpt: expect.stringMatching(/^v{1000,}$/),
      });
      const stored = await world.db.query<{ bytes: number }>(
        "SELECT max(octet_length(body))::int AS bytes FROM messages WHERE kind = 'watch.triggered'",
      );
      expect(stored.rows[0]!.bytes).toBeLessThanOrEqual(MAX_BODY_BYTES);
    } finally {
      await remove(creator, created.watchId);
    }
  });

  it('a notification takes from the member’s send limit (one bucket on every node); one held back arrives at a later poll, once', async () => {
    const mesh = await world.mesh(2);
    const creator = await world.peer(world.a, mesh, mesh.members[0]!);
    const elsewhere = await world.peer(world.b, mesh, mesh.members[0]!);
    // The member spends its whole burst through the other node.
    for (let i = 0; i < SEND_BURST; i++)
      await elsewhere.request({ type: 'send', id: `spend-${i}`, to: mesh.members[1]!.pubkey, body: 'x' });
    const seen = triggered(creator);
    const target = path('ready');
    const created = await create(creator, target, { notifyOn: 'match:ready' });
    try {
      await waitFor(
        async () => (await watch(creator, created.watchId))?.lastError?.includes('held back') === true,
        {
          timeoutMs: 3000,
          what: 'the first poll, held back',
        },
      );
      expect(seen).toEqual([]);
      // The burst window is 10 s: a later poll (every 5 s) notifies once the bucket refilled.
      await waitFor(() => seen.length === 1, { timeoutMs: 20_000, what: 'the held notification' });
      expect(seen[0]).toMatchObject({ watchId: created.watchId, oldValue: null, newValue: 'ready' });
      // The poll after the one that notified (fetched and recorded): the value still matches, and it
      // says nothing new.
      const polls = site.polls(target).length;
      const checked = (await watch(creator, created.watchId))?.lastCheckedAt;
      await waitFor(
        async () =>
          site.polls(target).length > polls &&
          (await watch(creator, created.watchId))?.lastCheckedAt !== checked,
        { timeoutMs: INTERVAL_SEC * 1000 + 2000, intervalMs: 100, what: 'the next poll' },
      );
      expect(seen).toHaveLength(1);
    } finally {
      await remove(creator, created.watchId);
    }
  }, 45_000);

  it('flips ha.watches there and back twice: the watch is polled again after every flip (within its interval) and notifies exactly when its value becomes the match', async () => {
    const mesh = await world.mesh(1);
    const creator = await world.peer(world.a, mesh, mesh.members[0]!);
    const seen = triggered(creator);
    const target = path('up');
    const created = await create(creator, target, { notifyOn: 'match:up' });
    await waitFor(() => seen.length === 1, { timeoutMs: 3000, what: 'the first-poll match' });
    const problems: string[] = [];
    // What the site says after each flip: the value leaves the match once and comes back once.
    const values = ['up', 'down', 'up', 'up'];
    for (const [i, flag] of flipSequence(world).entries()) {
      site.set(target, values[i]!);
      const before = site.polls(target).length;
      const checkedBefore = (await watch(creator, created.watchId))?.lastCheckedAt;
      await world.flip(flag);
      // Polled again, at the latest one interval after the last poll (then recorded).
      const polled = await waitFor(
        async () => {
          const info = await watch(creator, created.watchId);
          return site.polls(target).length > before && info?.lastCheckedAt !== checkedBefore
            ? info
            : undefined;
        },
        { timeoutMs: INTERVAL_SEC * 1000 + 2000, intervalMs: 100, what: `a poll after flip ${i}` },
      ).catch(() => undefined);
      if (!polled) problems.push(`flip ${i} (${flag ? 'on' : 'off'}): not polled within ${INTERVAL_SEC} s`);
      else if (polled.lastValue !== values[i]) problems.push(`flip ${i}: lastValue ${polled.lastValue}`);
    }
    // Notified on the first poll and when the value came back to "up": exactly twice.
    const expected = [
      { oldValue: null, newValue: 'up' },
      { oldValue: 'down', newValue: 'up' },
    ];
    await waitFor(() => seen.length >= expected.length, { timeoutMs: 1000 }).catch(() => {});
    const got = seen.map((t) => ({ oldValue: t.oldValue, newValue: t.newValue }));
    if (JSON.stringify(got) !== JSON.stringify(expected))
      problems.push(`notifications: ${JSON.stringify(got)}`);
    await remove(creator, created.watchId);
    expect(problems).toEqual([]);
  }, 60_000);
});
