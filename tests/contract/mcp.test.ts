/**
 * Contract of `McpRegistry` (broker/mcp/mcp.ts), against LocalMcpRegistry (one node, `ha.mcp` off) and
 * SharedMcpRegistry (two nodes, on): a server name is unique in a mesh and only its host session may
 * unregister it or answer its calls; a call reaches the host with a broker-made callId and its caller gets
 * exactly one `mcp.call_result` for its own callId (the host's answer, `timeout`, or `host_left` at once
 * when the host's socket goes); a server goes offline with its host's socket and disappears when the
 * host's session ends; and servers stay listed and callable while the flag is flipped there and back twice.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { MeshClient } from '../../client/client.js';
import type { Frame, McpCallResult, McpInvoke, McpServer } from '../../protocol/frames.js';
import { helloFrame } from '../helpers/hello.js';
import { RawSocket } from '../helpers/raw.js';
import { waitFor } from '../helpers/wait.js';
import { collect, flipSequence, useWorld, WORLDS } from './harness.js';

const CALL_TIMEOUT_MS = 800;
const GRACE_MS = 600;
const tools = [{ name: 'add', description: 'adds one', inputSchema: {} }];

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
    env: { MCP_CALL_TIMEOUT_MS: String(CALL_TIMEOUT_MS), PRESENCE_GRACE_MS: String(GRACE_MS) },
  });

  const register = (client: MeshClient, server: string, description = '') =>
    client.request({ type: 'mcp.register', server, description, tools });
  const servers = async (client: MeshClient) =>
    (await client.request<{ type: string; servers: McpServer[] }>({ type: 'mcp.list' })).servers;
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
});
