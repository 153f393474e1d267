/**
 * Streams across a node SIGKILL (issue 28, item 4): three `workbench broker` processes with `ha.streams`;
 * 1000 subscriptions (50 sessions × 20 streams) on k1 while k3 publishes on every stream. k1 is killed;
 * each session comes back on k2 (same session id, within its grace period, as a reconnecting peer does)
 * and resubscribes with the last position it saw. At least 99.9 % of those resumed subscriptions must be
 * `recovered: true`, and every subscriber must end up with every offset of its stream, once, in order
 * (offsets it got twice, live before its resubscription and again in the replay, are the peer's to drop).
 */
import type { MeshClient } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Frame } from '../../protocol/frames.js';
import { TestCluster } from '../helpers/cluster.js';
import { closeAllClients, connectPeer } from '../helpers/mesh.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

const SESSIONS = 50;
const STREAMS = 20;

let db: TestDatabase;
let cluster: TestCluster;

beforeAll(async () => {
  db = await createTestDatabase('streams_node_kill');
  cluster = new TestCluster(db.url, {
    PRESENCE_GRACE_MS: '30000',
    MESH_CONNECTION_CAP: '1000',
    FRAME_RATE_PER_SEC: '100000',
    FRAME_BURST: '100000',
  });
  cluster.setFlags('kill', ['ha.presence', 'ha.streams']);
  await Promise.all(['k1', 'k2', 'k3'].map((id) => cluster.start(id, 'kill')));
}, 60_000);
afterEach(closeAllClients);
afterAll(async () => {
  await cluster?.stop();
  await db?.drop();
});

type Data = Frame & { stream: string; data: number; offset: number; epoch: string };

/**
 * What one subscriber has seen of one stream, as a careful peer keeps it: `last` is the end of the
 * contiguous run from 1 (what it resumes after); offsets ahead of it (live frames that came on the new node
 * before its resubscription) wait in `ahead`; offsets it already has are repeats, dropped.
 */
class Seen {
  epoch = '';
  offsets: number[] = [];
  readonly ahead = new Set<number>();
  repeats = 0;
  add(frame: Data): void {
    this.epoch = frame.epoch;
    if (frame.offset <= this.last || this.ahead.has(frame.offset)) this.repeats++;
    else if (frame.offset > this.last + 1) this.ahead.add(frame.offset);
    else {
      this.offsets.push(frame.offset);
      while (this.ahead.delete(this.last + 1)) this.offsets.push(this.last + 1);
    }
  }
  get last(): number {
    return this.offsets.at(-1) ?? 0;
  }
}

describe('stream subscribers across a node SIGKILL', () => {
  it(`${SESSIONS * STREAMS} subscriptions resume on another node: ≥ 99.9 % recovered, every offset once and in order`, {
    timeout: 120_000,
  }, async () => {
    const mesh = await cluster.createMesh(SESSIONS + 1);
    const streams = Array.from({ length: STREAMS }, (_, i) => `feed-${i}`);
    const seen = new Map<string, Seen>();
    const track = (client: MeshClient, s: number) =>
      client.on('frame', (f) => {
        if (f.type === 'stream.data') seen.get(`${s}/${(f as Data).stream}`)?.add(f as Data);
      });
    const first: MeshClient[] = [];
    for (let s = 0; s < SESSIONS; s++) {
      const client = await connectPeer(cluster.node('k1').wsUrl, mesh, mesh.members[s + 1]!, {
        reconnect: false,
      });
      for (const stream of streams) seen.set(`${s}/${stream}`, new Seen());
      track(client, s);
      await Promise.all(streams.map((stream) => client.request({ type: 'stream.subscribe', stream })));
      first.push(client);
    }
    const publisher = await connectPeer(cluster.node('k3').wsUrl, mesh, mesh.members[0]!);
    let published = 0;
    let publishing = true;
    const traffic = (async () => {
      while (publishing) {
        await Promise.all(
          streams.map((stream) => publisher.request({ type: 'stream.publish', stream, data: published })),
        );
        published++;
        // The traffic's pace (about 50 rounds a second), not a wait for anything.
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    /** Resolves once `rounds` more rounds of traffic went out. */
    const moreRounds = (rounds: number) => {
      const from = published;
      return waitFor(() => published >= from + rounds, { timeoutMs: 20_000, what: `${rounds} more rounds` });
    };
    await waitFor(() => [...seen.values()].every((v) => v.last >= 5), {
      timeoutMs: 20_000,
      what: 'traffic at every subscriber',
    });
    await cluster.kill('k1');
    // Published while the sessions are away: theirs to recover.
    await moreRounds(50);
    const outcomes: Array<{ recovered?: boolean; reason?: string }> = [];
    for (let s = 0; s < SESSIONS; s++) {
      const back = await connectPeer(cluster.node('k2').wsUrl, mesh, mesh.members[s + 1]!, {
        sessionId: first[s]!.sessionId,
        reconnect: false,
      });
      track(back, s);
      const replies = await Promise.all(
        streams.map((stream) => {
          const at = seen.get(`${s}/${stream}`)!;
          return back.request<Frame & { recovered?: boolean; reason?: string }>({
            type: 'stream.subscribe',
            stream,
            since: { offset: at.last, epoch: at.epoch },
          });
        }),
      );
      outcomes.push(...replies);
    }
    await moreRounds(50);
    publishing = false;
    await traffic;
    const rounds = published;
    await waitFor(() => [...seen.values()].every((v) => v.last >= rounds), {
      timeoutMs: 20_000,
      what: `every subscriber at the last of ${rounds} rounds`,
    });
    const recovered = outcomes.filter((o) => o.recovered === true).length;
    const reasons = outcomes.filter((o) => o.recovered !== true).map((o) => o.reason);
    const repeats = [...seen.values()].reduce((n, v) => n + v.repeats, 0);
    console.log(
      `${recovered} of ${outcomes.length} resumed subscriptions recovered (${reasons.join(', ') || 'all'}); ${rounds} publishes per stream; ${repeats} repeated offsets dropped by the peers`,
    );
    expect(outcomes).toHaveLength(SESSIONS * STREAMS);
    expect(recovered / outcomes.length).toBeGreaterThanOrEqual(0.999);
    // Every subscriber: offsets 1..rounds, each once, in order (the stream was new, one epoch).
    for (const [key, at] of seen) {
      expect(at.offsets, key).toEqual(Array.from({ length: rounds }, (_, i) => i + 1));
      expect([...at.ahead], key).toEqual([]);
    }
  });
});
