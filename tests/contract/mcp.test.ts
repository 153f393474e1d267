/**
 * Contract of `McpRegistry` (broker/mcp/mcp.ts), against LocalMcpRegistry (one node, `ha.mcp` off) and
 * SharedMcpRegistry (two nodes, on): a server name is unique in a mesh and only its host session may
 * unregister it or answer its calls; a call reaches the host with a broker-made callId and its caller gets
 * exactly one `mcp.call_result` for its own callId (the host's answer, `timeout`, or `host_left` at once
 * when the host's socket goes); a server goes offline with its host's socket and disappears when the
 * host's session ends; and servers stay listed and callable while the flag is flipped there and back twice.
 * Issue 17: a member and a mesh hold at most so many servers and tools (one more is `limit_exceeded` and
 * changes nothing, however the registrations race over the nodes); `mcp.list` answers bounded pages with a
 * cursor; a revoked member's servers are gone at once from every node's list, and calls to them fail.
 */
import { randomUUID } from 'node:crypto';
import type { MeshClient } from '@mesh-broker/sdk';
import { describe, expect, it } from 'vitest';
import type { Frame, McpCallResult, McpInvoke, McpServer } from '../../protocol/frames.js';
import { helloFrame } from '../helpers/hello.js';
import { RawSocket } from '../helpers/raw.js';
import { waitFor } from '../helpers/wait.js';
import { collect, flipSequence, useWorld, WORLDS } from './harness.js';

const CALL_TIMEOUT_MS = 800;
const GRACE_MS = 600;
const tools = [{ name: 'add', description: 'adds one', inputSchema: {} }];
/** Small bounds, so that a test reaches each with a few registrations. */
const LIMITS = { serversPerMember: 3, serversPerMesh: 5, toolsPerMember: 4, toolsPerMesh: 7 };

/** `n` tools named t0…, each as the broker lists it. */
function toolsOf(n: number) {
  return Array.from({ length: n }, (_, i) => ({ name: `t${i}`, description: '', inputSchema: {} }));
}

/** A host that answers every `mcp.invoke` of `add` with `args.n + 1` (unless `silent`). */
function serve(host: MeshClient, options: { silent?: boolean } = {}): McpInvoke[] {
  const invokes: McpInvoke[] = [];
  host.on('frame', (f) => {
    if (f.type !== 'mcp.invoke') return;
    const invoke = f as unknown as McpInvoke;
    invokes.push(invoke);
    if (!options.silent)
      host.write({ type: 'mcp.result', callId: invoke.callId, result: (invoke.args as { n: number }).n + 1 });
  });
  return invokes;
}

describe.each(WORLDS)('McpRegistry contract, %s', (kind) => {
  const world = useWorld(kind, {
    flag: 'ha.mcp',
    env: {
      MCP_CALL_TIMEOUT_MS: String(CALL_TIMEOUT_MS),
      PRESENCE_GRACE_MS: String(GRACE_MS),
      MCP_MAX_SERVERS_PER_MEMBER: String(LIMITS.serversPerMember),
      MCP_MAX_SERVERS_PER_MESH: String(LIMITS.serversPerMesh),
      MCP_MAX_TOOLS_PER_MEMBER: String(LIMITS.toolsPerMember),
      MCP_MAX_TOOLS_PER_MESH: String(LIMITS.toolsPerMesh),
    },
  });

  const register = (client: MeshClient, server: string, description = '') =>
    client.request({ type: 'mcp.register', server, description, tools });
  const servers = async (client: MeshClient) =>
    (await client.request<{ type: string; servers: McpServer[] }>({ type: 'mcp.list' })).servers;
  const registerTools = (client: MeshClient, server: string, count: number) =>
    client.request({ type: 'mcp.register', server, tools: toolsOf(count) });
  /** The mesh's servers as `name:tools`, in name order. */
  const inventory = async (client: MeshClient) =>
    (await servers(client)).map((s) => `${s.server}:${s.tools.length}`);
  const call = (client: MeshClient, server: string, args: unknown, callId: string = randomUUID()) =>
    client.request<Frame & McpCallResult>(
      { type: 'mcp.call', callId, server, tool: 'add', args },
      { timeoutMs: CALL_TIMEOUT_MS + 5000 },
    );

  it('a server name is unique in a mesh, on every node; only its host session may unregister it', async () => {
    const mesh = await world.mesh(2);
    const host = await world.peer(world.a, mesh, mesh.members[0]!);
    const other = await world.peer(world.b, mesh, mesh.members[1]!);
    const sameMember = await world.peer(world.b, mesh, mesh.members[0]!);
    await register(host, 'calc', 'maths');
    for (const client of [other, sameMember]) {
      await expect(register(client, 'calc')).rejects.toThrow('conflict');
      await expect(client.request({ type: 'mcp.unregister', server: 'calc' })).rejects.toThrow('forbidden');
    }
    const expected = {
      server: 'calc',
      description: 'maths',
      host: mesh.members[0]!.pubkey,
      tools,
      online: true,
    };
    expect(await servers(other)).toEqual([expected]);
    // The host registering again replaces its entry; another mesh has names of its own.
    await register(host, 'calc', 'better maths');
    expect((await servers(other))[0]?.description).toBe('better maths');
    const otherMesh = await world.mesh(1);
    const elsewhere = await world.peer(world.b, otherMesh, otherMesh.members[0]!);
    await register(elsewhere, 'calc');
    expect(await host.request({ type: 'mcp.unregister', server: 'calc' })).toMatchObject({
      type: 'mcp.unregistered',
    });
    expect(await servers(other)).toEqual([]);
    await expect(call(other, 'calc', { n: 1 })).rejects.toThrow('not_found');
  });

  it('a call reaches the host, on any node, with a broker-made callId; the caller gets exactly one call_result for its own callId; only the host may answer', async () => {
    const mesh = await world.mesh(3);
    const host = await world.peer(world.a, mesh, mesh.members[0]!);
    const caller = await world.peer(world.b, mesh, mesh.members[1]!);
    const intruder = await world.peer(world.a, mesh, mesh.members[2]!);
    await register(host, 'calc');
    const invokes = serve(host, { silent: true });
    const results = collect<McpCallResult>(caller, 'mcp.call_result');
    const pending = call(caller, 'calc', { n: 41 }, 'my-call');
    await waitFor(() => invokes.length === 1);
    const [invoke] = invokes;
    expect(invoke).toMatchObject({
      type: 'mcp.invoke',
      server: 'calc',
      tool: 'add',
      args: { n: 41 },
      caller: mesh.members[1]!.pubkey,
    });
    expect(invoke!.callId).not.toBe('my-call');
    // Someone else's answer is refused (the call is not theirs, or unknown on their node).
    await expect(
      intruder.request({ type: 'mcp.result', callId: invoke!.callId, result: 'forged' }),
    ).rejects.toThrow(/forbidden|not_found/);
    expect(await host.request({ type: 'mcp.result', callId: invoke!.callId, result: 42 })).toMatchObject({
      type: 'mcp.result_accepted',
    });
    expect(await pending).toMatchObject({ type: 'mcp.call_result', callId: 'my-call', result: 42 });
    // Answered: a second answer is refused, and no second result reaches the caller.
    await expect(host.request({ type: 'mcp.result', callId: invoke!.callId, result: 43 })).rejects.toThrow(
      'not_found',
    );
    serve(host);
    expect((await call(caller, 'calc', { n: 1 }, 'later')).result).toBe(2);
    expect(results.map((r) => r.callId)).toEqual(['my-call', 'later']);
  });

  it('an unanswered call ends in error "timeout" after the call timeout', async () => {
    const mesh = await world.mesh(2);
    const host = await world.peer(world.a, mesh, mesh.members[0]!);
    const caller = await world.peer(world.b, mesh, mesh.members[1]!);
    await register(host, 'calc');
    serve(host, { silent: true });
    const startedAt = Date.now();
    expect(await call(caller, 'calc', { n: 1 }, 'slow')).toMatchObject({ callId: 'slow', error: 'timeout' });
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(CALL_TIMEOUT_MS - 50);
  });

  it("the host's socket goes: pending calls get host_left at once and the server is offline; back within the grace period it is online again; its session ends: the server is gone", async () => {
    const mesh = await world.mesh(2);
    const caller = await world.peer(world.b, mesh, mesh.members[1]!);
    const sessionId = randomUUID();
    const host = await RawSocket.open(world.a.wsUrl);
    host.send(helloFrame(mesh, mesh.members[0]!, { sessionId }));
    await host.next((f) => f.type === 'welcome');
    host.send({ type: 'mcp.register', server: 'calc', tools, rid: 'r' });
    await host.next((f) => f.rid === 'r');
    const pending = call(caller, 'calc', { n: 1 }, 'cut');
    await host.next((f) => f.type === 'mcp.invoke');
    const closedAt = Date.now();
    host.close();
    const result = await pending;
    expect(result.callId).toBe('cut');
    expect(result.error).toMatch(/^host_left/);
    expect(Date.now() - closedAt).toBeLessThan(Math.min(CALL_TIMEOUT_MS, GRACE_MS));
    expect(await servers(caller)).toMatchObject([{ server: 'calc', online: false }]);
    await expect(call(caller, 'calc', { n: 1 })).rejects.toThrow('unavailable');

    // The host session comes back (on the other node) within the grace period: online, callable there.
    const back = await world.peer(world.b, mesh, mesh.members[0]!, { sessionId });
    serve(back);
    await waitFor(async () => (await servers(caller))[0]?.online === true, {
      what: 'the server back online',
    });
    expect((await call(caller, 'calc', { n: 2 })).result).toBe(3);
    // It leaves for good: the server goes with its session.
    const left = caller.next('peer.left', (e) => e.sessionId === sessionId, GRACE_MS + 5000);
    back.close();
    await left;
    await waitFor(async () => (await servers(caller)).length === 0, { what: 'the server to go' });
    await expect(call(caller, 'calc', { n: 1 })).rejects.toThrow('not_found');
  });

  it('flips ha.mcp there and back twice: servers stay listed (also those registered or unregistered meanwhile) and callable', async () => {
    const mesh = await world.mesh(3);
    const host = await world.peer(world.a, mesh, mesh.members[0]!);
    const nearCaller = await world.peer(world.a, mesh, mesh.members[1]!);
    const farCaller = await world.peer(world.b, mesh, mesh.members[2]!);
    serve(host);
    await register(host, 'calc');
    const registered = new Set(['calc']);
    const problems: string[] = [];
    let n = 0;
    const check = async (label: string) => {
      const callers = world.crossNode() ? [nearCaller, farCaller] : [nearCaller];
      for (const caller of callers) {
        const listed = (await servers(caller)).map((s) => `${s.server}${s.online ? '' : ' (offline)'}`);
        if (JSON.stringify(listed) !== JSON.stringify([...registered].sort()))
          problems.push(
            `${label}: mcp.list ${JSON.stringify(listed)}, registered ${JSON.stringify([...registered].sort())}`,
          );
        for (const server of registered) {
          const value = ++n;
          const outcome = await call(caller, server, { n: value }).then(
            (r) => (r.result === value + 1 ? 'ok' : JSON.stringify(r)),
            (e) => String(e),
          );
          if (outcome !== 'ok') problems.push(`${label}: calling ${server}: ${outcome}`);
        }
      }
    };
    await check('before the flips');
    for (const [i, target] of flipSequence(world).entries()) {
      await world.flip(target);
      await check(`after flip ${i}`);
      // Registered while away from home, unregistered at the next flip: each flip meets both.
      if (i % 2 === 0) {
        await register(host, `extra-${i}`);
        registered.add(`extra-${i}`);
      } else {
        await host
          .request({ type: 'mcp.unregister', server: `extra-${i - 1}` })
          .catch((error) => problems.push(`after flip ${i}: unregistering extra-${i - 1}: ${String(error)}`));
        registered.delete(`extra-${i - 1}`);
      }
      await check(`after flip ${i}, ${i % 2 === 0 ? 'registered' : 'unregistered'} one`);
    }
    expect(problems).toEqual([]);
  }, 60_000);
  it('bounds servers and tools per member (its sessions together, on any node) and per mesh: one more is limit_exceeded and changes nothing', async () => {
    const mesh = await world.mesh(3);
    const [m0, m1, m2] = mesh.members;
    const first = await world.peer(world.a, mesh, m0!);
    const second = await world.peer(world.b, mesh, m0!); // the same member's other session
    const other = await world.peer(world.b, mesh, m1!);
    const third = await world.peer(world.a, mesh, m2!);
    await registerTools(first, 's1', 2);
    await registerTools(second, 's2', 2);
    // The member's tools: 4 of 4.
    await expect(registerTools(first, 's3', 1)).rejects.toThrow('limit_exceeded');
    // A replacement counts its new tools, not its old ones; one that would pass the bound changes nothing.
    await expect(registerTools(second, 's2', 3)).rejects.toThrow('limit_exceeded');
    await registerTools(first, 's1', 1);
    await registerTools(second, 's3', 1);
    // The member's servers: 3 of 3, whichever of its sessions asks.
    for (const client of [first, second])
      await expect(registerTools(client, 's4', 0)).rejects.toThrow('limit_exceeded');
    // The mesh's tools: 4 + 2 of 7, then 2 more would be 8 (the member's own bound is not reached).
    await registerTools(other, 't1', 2);
    await expect(registerTools(other, 't2', 2)).rejects.toThrow('limit_exceeded');
    await registerTools(other, 't2', 1);
    // The mesh's servers: 5 of 5.
    await expect(registerTools(third, 'u1', 0)).rejects.toThrow('limit_exceeded');
    const expected = ['s1:1', 's2:2', 's3:1', 't1:2', 't2:1'];
    expect(await inventory(third)).toEqual(expected);
    expect(await inventory(first)).toEqual(expected);
    // Unregistering makes room again.
    await second.request({ type: 'mcp.unregister', server: 's3' });
    await registerTools(third, 'u1', 0);
    expect(await inventory(other)).toEqual(['s1:1', 's2:2', 't1:2', 't2:1', 'u1:0']);
  });

  it("registrations racing on both nodes never pass the mesh's bound", async () => {
    const mesh = await world.mesh(4);
    const clients = await Promise.all(
      mesh.members.map((member, i) => world.peer(i % 2 === 0 ? world.a : world.b, mesh, member)),
    );
    // 4 members × 3 servers at once, against a mesh bound of 5.
    const outcomes = await Promise.all(
      clients.flatMap((client, i) =>
        [0, 1, 2].map((j) =>
          register(client, `m${i}-s${j}`).then(
            () => 'ok',
            (error: Error) => error.message.split(':')[0],
          ),
        ),
      ),
    );
    expect(outcomes.filter((o) => o === 'ok')).toHaveLength(LIMITS.serversPerMesh);
    expect(outcomes.filter((o) => o !== 'ok')).toEqual(
      Array(12 - LIMITS.serversPerMesh).fill('limit_exceeded'),
    );
    for (const client of clients) expect(await servers(client)).toHaveLength(LIMITS.serversPerMesh);
  });

  it('mcp.list answers pages in name order with a cursor: at most `limit` servers each, `next` until the last, every server once', async () => {
    const mesh = await world.mesh(2);
    const host = await world.peer(world.a, mesh, mesh.members[0]!);
    const otherHost = await world.peer(world.b, mesh, mesh.members[1]!);
    for (const name of ['delta', 'alpha', 'echo']) await register(host, name);
    for (const name of ['charlie', 'bravo']) await register(otherHost, name);
    const reader = otherHost;
    type Page = { type: string; servers: McpServer[]; next?: string };
    const seen: string[] = [];
    const pages: Page[] = [];
    let cursor: string | undefined;
    do {
      const page = await reader.request<Page>({ type: 'mcp.list', limit: 2, ...(cursor ? { cursor } : {}) });
      pages.push(page);
      seen.push(...page.servers.map((s) => s.server));
      cursor = page.next;
    } while (cursor !== undefined && pages.length < 10);
    const all = ['alpha', 'bravo', 'charlie', 'delta', 'echo'];
    expect(seen).toEqual(all);
    expect(pages.map((p) => p.servers.length)).toEqual([2, 2, 1]);
    expect(pages.at(-1)!.next).toBeUndefined();
    // The documented form, no cursor: the first page, the whole list of a small mesh, without `next`.
    const whole = await reader.request<Page>({ type: 'mcp.list' });
    expect(whole.servers.map((s) => s.server)).toEqual(all);
    expect(whole.next).toBeUndefined();
    // A cursor past every name: an empty last page. A malformed one: bad_request.
    expect(await reader.request<Page>({ type: 'mcp.list', cursor: 'zulu' })).toMatchObject({ servers: [] });
    await expect(reader.request({ type: 'mcp.list', cursor: 'not a name!' })).rejects.toThrow('bad_request');
    await expect(reader.request({ type: 'mcp.list', limit: 0 })).rejects.toThrow('bad_request');
  });

  it("a revoked member's servers are gone at once from every node's mcp.list (its socket open, or in its grace period), and calls to them fail", async () => {
    const mesh = await world.mesh(2);
    const [revokedKeys, keptKeys] = mesh.members;
    const live = await world.peer(world.a, mesh, revokedKeys!);
    serve(live);
    await register(live, 'live-one');
    const lingering = await RawSocket.open(world.a.wsUrl);
    lingering.send(helloFrame(mesh, revokedKeys!));
    await lingering.next((f) => f.type === 'welcome');
    lingering.send({ type: 'mcp.register', server: 'lingering', tools, rid: 'r' });
    await lingering.next((f) => f.rid === 'r');
    const keeper = await world.peer(world.b, mesh, keptKeys!);
    serve(keeper);
    await register(keeper, 'kept');
    const near = await world.peer(world.a, mesh, keptKeys!);
    lingering.close();
    await lingering.closed; // its session is in its grace period now
    const revoked = await world.a.admin(
      `/admin/meshes/${mesh.meshId}/members/${revokedKeys!.pubkey}/revoke`,
      {
        method: 'POST',
      },
    );
    expect(revoked.status).toBe(200);
    // In the shared world `near` is on the host's node and `keeper` on the other one.
    for (const reader of [near, keeper]) {
      expect((await servers(reader)).map((s) => s.server)).toEqual(['kept']);
      await expect(call(reader, 'live-one', { n: 1 })).rejects.toThrow('not_found');
      await expect(call(reader, 'lingering', { n: 1 })).rejects.toThrow('not_found');
    }
    // The other member's server is untouched; the names are free again.
    expect((await call(keeper, 'kept', { n: 1 })).result).toBe(2);
    await register(keeper, 'live-one');
  });
});
