/**
 * Issue 17, MCP and streams: what a member with a valid key can make a node hold, driven the way an
 * attacker would (raw sockets pipelining frames without waiting for replies, many sessions of one member,
 * on every node), against both implementations (one node with every HA flag off; two nodes with every
 * flag on, one Postgres and one Redis):
 * - MCP servers and tools per member and per mesh, and stream subscriptions per session, are bounded: one
 *   more is `limit_exceeded` and changes nothing;
 * - `mcp.list` and `stream.list` replies are bounded pages (a mesh of 300 servers of 55 KiB once gave one
 *   16.4 MiB reply per 30-byte request), and paging returns everything once;
 * - a revoked member's servers vanish from every node's list at once, also while its session is in its
 *   grace period, and calls to them fail.
 */

import { listMcpServers, listStreams } from '@mesh-broker/sdk';
import { describe, expect, it } from 'vitest';
import { collect, useWorld, WORLDS, type World } from '../contract/harness.js';
import type { TestNode } from '../helpers/broker.js';
import { helloFrame } from '../helpers/hello.js';
import type { TestMesh } from '../helpers/mesh.js';
import { type Frame, RawSocket } from '../helpers/raw.js';
import { waitFor } from '../helpers/wait.js';

/**
 * Timings of these worlds: a grace period short enough for the closed clients of one test to settle
 * before the world's teardown; and a heartbeat long enough that a socket the node stopped reading for a
 * while (its inbound backpressure, which also leaves its pongs unread) or a reader that pauses on purpose
 * is not dropped as dead meanwhile.
 */
const TIMINGS = { PRESENCE_GRACE_MS: '3000', HEARTBEAT_MS: '5000', NODE_DEAD_MS: '15000' };
const LIST_MAX_BYTES = 64 * 1024;

/** An attacker's session: a raw socket that said hello, and counts the bytes of every frame it gets. */
async function attacker(node: TestNode, mesh: TestMesh, member: TestMesh['members'][number]) {
  const socket = await RawSocket.open(node.wsUrl);
  const frameBytes: number[] = [];
  socket.socket.on('message', (data) => frameBytes.push((data as Buffer).length));
  socket.send(helloFrame(mesh, member));
  await socket.next((f) => f.type === 'welcome');
  return { socket, frameBytes };
}

let nextRid = 0;

/** Sends every frame at once (no waiting between them), then resolves with their replies, in order. */
async function blast(socket: RawSocket, frames: object[], timeoutMs = 30_000): Promise<Frame[]> {
  const rids = frames.map(() => `b${nextRid++}`);
  frames.forEach((frame, i) => {
    socket.send({ ...frame, rid: rids[i] });
  });
  const replies: Frame[] = [];
  for (const rid of rids) replies.push(await socket.next((f) => f.rid === rid, timeoutMs));
  return replies;
}

/** What each reply was: its type, or its error code. */
const outcomes = (replies: Frame[]) => replies.map((r) => (r.type === 'error' ? String(r.code) : r.type));
const count = (values: string[], value: string) => values.filter((v) => v === value).length;

const tool = (name: string, description = '') => ({ name, description, inputSchema: {} });
const registerFrame = (server: string, tools: object[] = [tool('t')], description = '') => ({
  type: 'mcp.register',
  server,
  description,
  tools,
});

/** Every server name of the mesh, following `mcp.list` pages from a raw socket. */
async function pagedServers(socket: RawSocket): Promise<{ names: string[]; pages: number }> {
  const names: string[] = [];
  let cursor: string | undefined;
  let pages = 0;
  do {
    const [page] = await blast(socket, [{ type: 'mcp.list', ...(cursor ? { cursor } : {}) }]);
    pages++;
    names.push(...(page!.servers as Array<{ server: string }>).map((s) => s.server));
    cursor = page!.next as string | undefined;
  } while (cursor !== undefined && pages < 1000);
  return { names, pages };
}

const revoke = (world: World, mesh: TestMesh, pubkey: string) =>
  world.b.admin(`/admin/meshes/${mesh.meshId}/members/${pubkey}/revoke`, { method: 'POST' });

describe.each(WORLDS)('MCP and stream abuse, %s', (kind) => {
  describe('with the default bounds', () => {
    // The node's own defaults: 20 servers and 500 tools per member, 200 and 5000 per mesh, 100
    // subscriptions per session.
    const world = useWorld(kind, { flag: 'ha.mcp', env: TIMINGS });

    it("one member's 21st server is refused, however its sessions on every node pipeline their registrations", async () => {
      const mesh = await world.mesh(2);
      const [evil, reader] = mesh.members;
      const sessions = await Promise.all(
        [world.a, world.a, world.b].map((node) => attacker(node, mesh, evil!)),
      );
      const replies = await Promise.all(
        sessions.map(({ socket }, s) =>
          blast(
            socket,
            Array.from({ length: 10 }, (_, i) => registerFrame(`evil-${s}-${i}`)),
          ),
        ),
      );
      const all = outcomes(replies.flat());
      expect(count(all, 'mcp.registered')).toBe(20);
      expect(count(all, 'limit_exceeded')).toBe(10);
      const watcher = await attacker(world.b, mesh, reader!);
      expect((await pagedServers(watcher.socket)).names).toHaveLength(20);
      // At the bound, a session may still replace a server of its own; a new name is refused.
      const mine = replies[0]!.findIndex((r) => r.type === 'mcp.registered');
      expect(
        outcomes(
          await blast(sessions[0]!.socket, [registerFrame(`evil-0-${mine}`), registerFrame('evil-new')]),
        ),
      ).toEqual(['mcp.registered', 'limit_exceeded']);
    });

    it("a mesh's 201st server is refused when 11 members race 20 registrations each over both nodes", async () => {
      const mesh = await world.mesh(11);
      const sessions = await Promise.all(
        mesh.members.map((member, m) => attacker(m % 2 === 0 ? world.a : world.b, mesh, member)),
      );
      const replies = await Promise.all(
        sessions.map(({ socket }, m) =>
          blast(
            socket,
            Array.from({ length: 20 }, (_, i) => registerFrame(`m${m}-s${i}`)),
          ),
        ),
      );
      const all = outcomes(replies.flat());
      expect(count(all, 'mcp.registered')).toBe(200);
      expect(count(all, 'limit_exceeded')).toBe(20);
      expect((await pagedServers(sessions[1]!.socket)).names).toHaveLength(200);
    });

    it("tools past a member's 500 or a mesh's 5000 are refused and change nothing", async () => {
      const mesh = await world.mesh(11);
      const hundredTools = Array.from({ length: 100 }, (_, i) => tool(`t${i}`));
      const sessions = await Promise.all(
        mesh.members.map((member, m) => attacker(m % 2 === 0 ? world.a : world.b, mesh, member)),
      );
      // One member: 5 servers of 100 tools fill its 500; a sixth with one tool is one too many.
      const own = outcomes(
        await blast(sessions[0]!.socket, [
          ...Array.from({ length: 5 }, (_, i) => registerFrame(`big-${i}`, hundredTools)),
          registerFrame('one-more', [tool('t')]),
          // A replacement counts its new tools instead of its old ones: 100 for 100 fits.
          registerFrame(
            'big-0',
            hundredTools.map((t) => ({ ...t, description: 'new' })),
          ),
        ]),
      );
      expect(own).toEqual([...Array(5).fill('mcp.registered'), 'limit_exceeded', 'mcp.registered']);
      // Nine more members with 500 each: the mesh holds 5000 tools; the eleventh member's one tool is refused.
      const others = await Promise.all(
        sessions.slice(1, 10).map(({ socket }, m) =>
          blast(
            socket,
            Array.from({ length: 5 }, (_, i) => registerFrame(`m${m}-big-${i}`, hundredTools)),
          ),
        ),
      );
      expect(count(outcomes(others.flat()), 'mcp.registered')).toBe(45);
      expect(outcomes(await blast(sessions[10]!.socket, [registerFrame('last', [tool('t')])]))).toEqual([
        'limit_exceeded',
      ]);
      const listed = await pagedServers(sessions[10]!.socket);
      expect(listed.names).toHaveLength(50);
      expect(listed.names).not.toContain('last');
      expect(listed.names).not.toContain('one-more');
    });

    it('a session past 100 stream subscriptions is refused, the rest of the mesh is not', async () => {
      const mesh = await world.mesh(2);
      const evil = await attacker(world.a, mesh, mesh.members[0]!);
      const replies = outcomes(
        await blast(
          evil.socket,
          Array.from({ length: 120 }, (_, i) => ({ type: 'stream.subscribe', stream: `s${i}` })),
        ),
      );
      expect(replies.slice(0, 100)).toEqual(Array(100).fill('stream.subscribed'));
      expect(replies.slice(100)).toEqual(Array(20).fill('limit_exceeded'));
      const other = await attacker(world.b, mesh, mesh.members[1]!);
      expect(outcomes(await blast(other.socket, [{ type: 'stream.subscribe', stream: 's0' }]))).toEqual([
        'stream.subscribed',
      ]);
      const [listed] = await blast(other.socket, [{ type: 'stream.list' }]);
      expect(listed!.streams).toHaveLength(100);
      expect((listed!.streams as Array<{ name: string; subscribers: number }>)[0]).toEqual({
        name: 's0',
        subscribers: 2,
      });
    });

    it('stream.list is paged: 7 sessions × 100 streams of 128 characters come in bounded pages, every stream once', async () => {
      const mesh = await world.mesh(7);
      const sessions = await Promise.all(
        mesh.members.map((member, m) => attacker(m % 2 === 0 ? world.a : world.b, mesh, member)),
      );
      const name = (m: number, i: number) => `${String(m)}-${String(i).padStart(3, '0')}-`.padEnd(128, 'x');
      await Promise.all(
        sessions.map(({ socket }, m) =>
          blast(
            socket,
            Array.from({ length: 100 }, (_, i) => ({ type: 'stream.subscribe', stream: name(m, i) })),
          ),
        ),
      );
      const reader = sessions[0]!;
      const before = reader.frameBytes.length;
      const first = await blast(reader.socket, [{ type: 'stream.list' }]);
      expect(first[0]!.streams).toHaveLength(500);
      expect(first[0]!.next).toBeDefined();
      const streams = await listStreamsRaw(reader.socket, first[0]!);
      expect(streams).toHaveLength(700);
      expect(new Set(streams).size).toBe(700);
      expect(streams).toEqual([...streams].sort());
      for (const bytes of reader.frameBytes.slice(before)) expect(bytes).toBeLessThan(100 * 1024);
      // The SDK follows the pages.
      const peer = await world.peer(world.b, mesh, mesh.members[1]!);
      expect((await listStreams(peer)).map((s) => s.name)).toEqual(streams);
    });

    it("a revoked member's servers vanish from every node's mcp.list at once, also while its session is in its grace period; calls to them fail", async () => {
      const mesh = await world.mesh(2);
      const [evil, other] = mesh.members;
      const live = await attacker(world.a, mesh, evil!);
      await blast(live.socket, [registerFrame('live')]);
      const gone = await attacker(world.a, mesh, evil!);
      await blast(gone.socket, [registerFrame('in-grace')]);
      gone.socket.close();
      await gone.socket.closed;
      const near = await world.peer(world.a, mesh, other!);
      const far = await world.peer(world.b, mesh, other!);
      const results = collect(near, 'mcp.call_result');
      // A call in flight to the live server when the member is revoked.
      near.write({ type: 'mcp.call', callId: 'in-flight', server: 'live', tool: 't', args: {} });
      await live.socket.next((f) => f.type === 'mcp.invoke');
      expect((await revoke(world, mesh, evil!.pubkey)).status).toBe(200);
      expect((await live.socket.closed).code).toBe(4403);
      for (const client of [near, far]) {
        expect(await listMcpServers(client)).toEqual([]);
        for (const server of ['live', 'in-grace'])
          await expect(
            client.request({ type: 'mcp.call', callId: `after-${server}`, server, tool: 't' }),
          ).rejects.toThrow('not_found');
      }
      await waitFor(() => results.length > 0, { what: "the in-flight call's answer" });
      expect(results).toEqual([
        expect.objectContaining({ callId: 'in-flight', error: expect.stringMatching(/^host_left/) }),
      ]);
    });
  });

  describe('a mesh of 300 servers of 55 KiB', () => {
    // Bounds raised past the defaults, to replay the experiment of issue 17 (16.4 MiB per reply).
    const world = useWorld(kind, {
      flag: 'ha.mcp',
      env: {
        ...TIMINGS,
        MCP_MAX_SERVERS_PER_MEMBER: '300',
        MCP_MAX_SERVERS_PER_MESH: '300',
        MCP_MAX_TOOLS_PER_MEMBER: '10000',
        MCP_MAX_TOOLS_PER_MESH: '10000',
      },
    });

    it('every mcp.list reply frame is at most 64 KiB, also to readers that never read, and paging returns all 300 once', async () => {
      const mesh = await world.mesh(2);
      const host = await attacker(world.a, mesh, mesh.members[0]!);
      const heavyTools = Array.from({ length: 25 }, (_, i) => tool(`t${i}`, 'd'.repeat(2000)));
      for (let batch = 0; batch < 300; batch += 50) {
        const replies = await blast(
          host.socket,
          Array.from({ length: 50 }, (_, i) =>
            registerFrame(`heavy-${String(batch + i).padStart(3, '0')}`, heavyTools, 'x'.repeat(2000)),
          ),
        );
        expect(count(outcomes(replies), 'mcp.registered')).toBe(50);
      }
      const reader = await attacker(world.b, mesh, mesh.members[1]!);
      const before = reader.frameBytes.length;
      const { names, pages } = await pagedServers(reader.socket);
      expect(names).toEqual(Array.from({ length: 300 }, (_, i) => `heavy-${String(i).padStart(3, '0')}`));
      expect(pages).toBeGreaterThan(1);
      const sizes = reader.frameBytes.slice(before);
      expect(sizes).toHaveLength(pages);
      for (const bytes of sizes) expect(bytes).toBeLessThanOrEqual(LIST_MAX_BYTES);
      // Twenty sessions that ask once and never read: each is owed one page, no more.
      const slow = await Promise.all(
        Array.from({ length: 20 }, (_, i) => attacker(i % 2 ? world.a : world.b, mesh, mesh.members[1]!)),
      );
      for (const { socket } of slow) socket.socket.pause();
      for (const { socket } of slow) socket.send({ type: 'mcp.list' });
      // The SDK follows the pages.
      const peer = await world.peer(world.a, mesh, mesh.members[1]!);
      expect((await listMcpServers(peer)).map((s) => s.server)).toEqual(names);
      for (const { socket } of slow) {
        socket.socket.resume();
        const page = await socket.next((f) => f.type === 'mcp.list_result', 15_000);
        expect((page.servers as unknown[]).length).toBeLessThan(300);
      }
      for (const { frameBytes } of slow)
        for (const bytes of frameBytes) expect(bytes).toBeLessThanOrEqual(LIST_MAX_BYTES);
    }, 120_000);
  });
});

/** The stream names of every page from `first` on, following `next` from a raw socket. */
async function listStreamsRaw(socket: RawSocket, first: Frame): Promise<string[]> {
  const names = (first.streams as Array<{ name: string }>).map((s) => s.name);
  let cursor = first.next as string | undefined;
  while (cursor !== undefined) {
    const [page] = await blast(socket, [{ type: 'stream.list', cursor }]);
    names.push(...(page!.streams as Array<{ name: string }>).map((s) => s.name));
    cursor = page!.next as string | undefined;
  }
  return names;
}
