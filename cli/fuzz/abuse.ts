/**
 * The resource-abuse cases of `workbench fuzz`: well-formed frames of valid members that try to make a node
 * hold memory. Each case runs for a bounded time against one node while two good peers exchange DMs, and
 * is judged by the node's own resident memory (its /metrics) and by whether the good peers were served:
 *
 * - `amplification`: a member registers MCP servers until refused, then sessions that never read ask for
 *   the list again and again (each small request would be a large reply);
 * - `slow-reader`: sessions subscribe to a stream and stop reading while a publisher fills it;
 * - `flood`: sockets write large frames as fast as their TCP connection takes them.
 *
 * A finding: the node's RSS grew past the bound during a case, a good DM was not delivered in time, or the
 * node stopped answering /health.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { type MemberKeys, MeshClient, signHello } from '@mesh-broker/sdk';
import { WebSocket } from 'ws';
import type { Finding } from './run.js';

export const ABUSE_CASES = ['amplification', 'slow-reader', 'flood'] as const;
export type AbuseCase = (typeof ABUSE_CASES)[number];

export interface AbuseOptions {
  url: string;
  meshId: string;
  /** Members that attack (at least 3); the first two of `good` exchange DMs throughout. */
  attackers: MemberKeys[];
  good: [MemberKeys, MemberKeys];
  /** How long each case attacks. */
  seconds: number;
  /** The most the node's RSS may grow during a case. */
  rssBoundBytes: number;
  cases: readonly AbuseCase[];
}

export interface AbuseResult {
  case: AbuseCase;
  rssBeforeBytes: number;
  rssPeakGrowthBytes: number;
  goodDms: number;
  /** The slowest good DM, from send to delivery. */
  goodDmMaxMs: number;
  /** What the attacker got done (servers registered, requests or frames written). */
  attack: Record<string, number>;
}

/** A socket of a member, welcomed; it can stop reading (its TCP socket paused) like a stalled peer. */
class AttackSocket {
  private constructor(readonly socket: WebSocket) {}

  static async open(url: string, meshId: string, member: MemberKeys): Promise<AttackSocket> {
    const socket = new WebSocket(`${url.replace(/^http/, 'ws')}/ws`, { maxPayload: 64 * 1024 * 1024 });
    socket.on('error', () => {});
    await new Promise<void>((resolve, reject) => {
      socket.once('open', () => resolve());
      socket.once('error', reject);
    });
    const welcome = new Promise<void>((resolve, reject) => {
      // Events of the mesh (peer.joined) may come first; an error frame means the hello was refused.
      const onMessage = (data: unknown) => {
        const frame = JSON.parse(String(data)) as { type: string };
        if (frame.type === 'welcome') {
          socket.off('message', onMessage);
          resolve();
        } else if (frame.type === 'error') reject(new Error(`no welcome: ${String(data).slice(0, 200)}`));
      };
      socket.on('message', onMessage);
      socket.once('close', (code) => reject(new Error(`closed ${code} before welcome`)));
    });
    const fields = await signHello(member, meshId, randomUUID());
    socket.send(JSON.stringify({ type: 'hello', v: 1, ...fields }));
    await welcome;
    return new AttackSocket(socket);
  }

  /** Sends a request and waits for the frame that answers it (by `rid`). */
  request(frame: Record<string, unknown>): Promise<Record<string, unknown>> {
    const rid = randomUUID();
    return new Promise((resolve, reject) => {
      const onMessage = (data: unknown) => {
        const reply = JSON.parse(String(data)) as Record<string, unknown>;
        if (reply.rid !== rid) return;
        this.socket.off('message', onMessage);
        resolve(reply);
      };
      this.socket.on('message', onMessage);
      this.socket.once('close', (code) => reject(new Error(`closed ${code}`)));
      this.socket.send(JSON.stringify({ ...frame, rid }));
    });
  }

  stopReading(): void {
    (this.socket as unknown as { _socket: { pause(): void } })._socket.pause();
  }

  get open(): boolean {
    return this.socket.readyState === WebSocket.OPEN;
  }

  close(): void {
    this.socket.terminate();
  }
}

async function rssOf(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
  const match = /^mesh_broker_process_process_resident_memory_bytes\{[^}]*\} (\S+)$/m.exec(text);
  if (!match) throw new Error('the node reports no resident memory in /metrics');
  return Number(match[1]);
}

const until = (deadline: number) => Date.now() < deadline;

/** Writes as fast as the socket's TCP connection takes it, until the deadline. */
async function writeFlat(socket: AttackSocket, frame: string, deadline: number): Promise<number> {
  let written = 0;
  while (until(deadline) && socket.open) {
    // At most a chunk per turn: the good peers of this process must keep their share of it.
    for (let i = 0; i < 200 && socket.socket.bufferedAmount < 1024 * 1024 && socket.open; i++) {
      socket.socket.send(frame);
      written++;
    }
    await sleep(socket.socket.bufferedAmount < 1024 * 1024 ? 1 : 10);
  }
  return written;
}

type Attack = (
  options: AbuseOptions,
  deadline: number,
  sockets: AttackSocket[],
) => Promise<Record<string, number>>;

const ATTACKS: Record<AbuseCase, Attack> = {
  async amplification(options, deadline, sockets) {
    const host = await AttackSocket.open(options.url, options.meshId, options.attackers[0]!);
    sockets.push(host);
    const tool = (i: number) => ({
      name: `tool-${i}`,
      description: 'd'.repeat(500),
      inputSchema: { type: 'object', description: 'x'.repeat(200) },
    });
    let servers = 0;
    for (let i = 0; i < 300 && until(deadline); i++) {
      const reply = await host.request({
        type: 'mcp.register',
        server: `amp-${i}`,
        description: 'e'.repeat(2000),
        tools: Array.from({ length: 60 }, (_, t) => tool(t)),
      });
      if (reply.type !== 'mcp.registered') break; // refused: the cap
      servers++;
    }
    const readers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        AttackSocket.open(options.url, options.meshId, options.attackers[1 + (i % 2)]!),
      ),
    );
    sockets.push(...readers);
    for (const reader of readers) reader.stopReading();
    const requests = await Promise.all(
      readers.map((reader) => writeFlat(reader, JSON.stringify({ type: 'mcp.list', rid: 'amp' }), deadline)),
    );
    return { servers, requests: requests.reduce((a, b) => a + b, 0) };
  },

  async 'slow-reader'(options, deadline, sockets) {
    const stream = `slow-${randomUUID()}`;
    const readers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        AttackSocket.open(options.url, options.meshId, options.attackers[1 + (i % 2)]!),
      ),
    );
    sockets.push(...readers);
    for (const reader of readers) {
      await reader.request({ type: 'stream.subscribe', stream });
      reader.stopReading();
    }
    const publisher = await AttackSocket.open(options.url, options.meshId, options.attackers[0]!);
    sockets.push(publisher);
    const published = await writeFlat(
      publisher,
      JSON.stringify({ type: 'stream.publish', stream, data: 'p'.repeat(30 * 1024) }),
      deadline,
    );
    return { published, stillOpen: readers.filter((reader) => reader.open).length };
  },

  async flood(options, deadline, sockets) {
    const flooders = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        AttackSocket.open(options.url, options.meshId, options.attackers[i % 3]!),
      ),
    );
    sockets.push(...flooders);
    const frame = JSON.stringify({ type: 'ping', pad: 'f'.repeat(60 * 1024) });
    const written = await Promise.all(flooders.map((flooder) => writeFlat(flooder, frame, deadline)));
    return { frames: written.reduce((a, b) => a + b, 0) };
  },
};

/** Runs each case in turn; returns what each did and the findings. */
export async function runAbuseCases(
  options: AbuseOptions,
): Promise<{ results: AbuseResult[]; findings: Finding[] }> {
  const results: AbuseResult[] = [];
  const findings: Finding[] = [];
  const sender = new MeshClient({
    urls: [`${options.url.replace(/^http/, 'ws')}/ws`],
    meshId: options.meshId,
    keys: options.good[0],
  });
  const receiver = new MeshClient({
    urls: [`${options.url.replace(/^http/, 'ws')}/ws`],
    meshId: options.meshId,
    keys: options.good[1],
  });
  await Promise.all([sender.connect(), receiver.connect()]);
  const delivered = new Set<string>();
  receiver.on('message', (message) => delivered.add(message.body));
  try {
    for (const [index, name] of options.cases.entries()) {
      const finding = (problem: string) => findings.push({ index, kind: `abuse ${name}`, problem });
      const rssBefore = await rssOf(options.url);
      let peak = rssBefore;
      const sampler = setInterval(() => {
        rssOf(options.url).then(
          (rss) => {
            peak = Math.max(peak, rss);
          },
          () => {},
        );
      }, 200);
      const sockets: AttackSocket[] = [];
      const deadline = Date.now() + options.seconds * 1000;
      // The good peers: one DM a second (within the default send quota), each due within 5 s.
      let goodDms = 0;
      let goodDmMaxMs = 0;
      const goodTraffic = (async () => {
        while (until(deadline)) {
          const body = `${name}-${goodDms++}`;
          const sent = Date.now();
          await sender.send(options.good[1].pubkey, body, { timeoutMs: 5000 }).catch((error: Error) => {
            finding(`a good DM was not accepted: ${error.message}`);
          });
          while (!delivered.has(body) && Date.now() - sent < 5000) await sleep(10);
          if (!delivered.has(body)) finding(`a good DM was not delivered within 5 s (${body})`);
          goodDmMaxMs = Math.max(goodDmMaxMs, Date.now() - sent);
          await sleep(1000);
        }
      })();
      let attack: Record<string, number> = {};
      try {
        attack = await ATTACKS[name](options, deadline, sockets);
      } catch (error) {
        finding(`the attack itself failed: ${(error as Error).message}`);
      }
      await goodTraffic;
      for (const socket of sockets) socket.close();
      await sleep(500);
      clearInterval(sampler);
      peak = Math.max(peak, await rssOf(options.url));
      const growth = peak - rssBefore;
      if (growth > options.rssBoundBytes)
        finding(`the node's RSS grew by ${mib(growth)} MiB (bound ${mib(options.rssBoundBytes)} MiB)`);
      const health = await fetch(`${options.url}/health`).then(
        (response) => response.status,
        () => 0,
      );
      if (health !== 200) finding(`the node's /health answered ${health} after the case`);
      results.push({
        case: name,
        rssBeforeBytes: rssBefore,
        rssPeakGrowthBytes: growth,
        goodDms,
        goodDmMaxMs,
        attack,
      });
    }
  } finally {
    sender.close();
    receiver.close();
  }
  return { results, findings };
}

const mib = (bytes: number) => (bytes / (1024 * 1024)).toFixed(1);
