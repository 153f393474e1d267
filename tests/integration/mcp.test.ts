import type { MeshClient } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Frame } from '../../protocol/frames.js';
import type { TestNode } from '../helpers/broker.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
let node: TestNode;

beforeAll(async () => {
  db = await createTestDatabase('mcp');
  node = await startNode({ kind: 'in-process', databaseUrl: db.url, env: { MCP_CALL_TIMEOUT_MS: '400' } });
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

const tools = [{ name: 'add', description: 'adds', inputSchema: { type: 'object' } }];

async function hostAndCaller() {
  const mesh = await createMesh(node, 3);
  const [host, caller, other] = await Promise.all(mesh.members.map((m) => connectPeer(node.wsUrl, mesh, m)));
  expect(
    await host!.request({ type: 'mcp.register', server: 'calc', description: 'maths', tools }),
  ).toMatchObject({
    type: 'mcp.registered',
    server: 'calc',
  });
  return { mesh, host: host!, caller: caller!, other: other! };
}

function answerWith(host: MeshClient, reply: (invoke: Frame) => object) {
  host.on('frame', (f) => {
    if (f.type === 'mcp.invoke') host.write({ type: 'mcp.result', callId: f.callId as string, ...reply(f) });
  });
}

describe('MCP tools hosted by peers, on one node', () => {
  it('lists servers and routes a call to the host and its result back to the caller', async () => {
    const { mesh, host, caller } = await hostAndCaller();
    const list = await caller.request({ type: 'mcp.list' });
    expect(list.servers).toEqual([
      { server: 'calc', description: 'maths', host: mesh.members[0]!.pubkey, tools, online: true },
    ]);
    const invoked = host.next('frame', (f) => f.type === 'mcp.invoke');
    answerWith(host, (invoke) => ({ result: { sum: (invoke.args as { a: number; b: number }).a + 2 } }));
    const result = await caller.request({
      type: 'mcp.call',
      callId: 'c1',
      server: 'calc',
      tool: 'add',
      args: { a: 1, b: 2 },
    });
    expect(result).toMatchObject({ type: 'mcp.call_result', callId: 'c1', result: { sum: 3 } });
    expect(await invoked).toMatchObject({
      server: 'calc',
      tool: 'add',
      args: { a: 1, b: 2 },
      caller: mesh.members[1]!.pubkey,
    });
  });

  it('passes a host error through', async () => {
    const { host, caller } = await hostAndCaller();
    answerWith(host, () => ({ error: 'division by zero' }));
    const result = await caller.request({
      type: 'mcp.call',
      callId: 'c2',
      server: 'calc',
      tool: 'add',
      args: {},
    });
    expect(result).toMatchObject({ callId: 'c2', error: 'division by zero' });
  });

  it('refuses a result from anyone but the host', async () => {
    const { host, caller, other } = await hostAndCaller();
    const invoke = host.next('frame', (f) => f.type === 'mcp.invoke');
    const call = caller.request({ type: 'mcp.call', callId: 'c3', server: 'calc', tool: 'add', args: {} });
    const { callId } = await invoke;
    await expect(other.request({ type: 'mcp.result', callId, result: 'forged' })).rejects.toThrow(
      'forbidden',
    );
    host.write({ type: 'mcp.result', callId: callId as string, result: 'genuine' });
    expect(await call).toMatchObject({ result: 'genuine' });
  });

  it('answers "timeout" when the host never answers', async () => {
    const { caller } = await hostAndCaller();
    const started = Date.now();
    const result = await caller.request({
      type: 'mcp.call',
      callId: 'c4',
      server: 'calc',
      tool: 'add',
      args: {},
    });
    expect(result).toMatchObject({ type: 'mcp.call_result', callId: 'c4', error: 'timeout' });
    expect(Date.now() - started).toBeGreaterThanOrEqual(350);
  });

  it('fails pending calls at once when the host disconnects, and shows the server offline', async () => {
    const { host, caller } = await hostAndCaller();
    const invoked = host.next('frame', (f) => f.type === 'mcp.invoke');
    const call = caller.request({ type: 'mcp.call', callId: 'c5', server: 'calc', tool: 'add', args: {} });
    await invoked;
    host.close();
    const result = await call;
    expect(result.error).toMatch(/^host_left/);
    const list = await caller.request({ type: 'mcp.list' });
    expect(list.servers).toMatchObject([{ server: 'calc', online: false }]);
    await expect(
      caller.request({ type: 'mcp.call', callId: 'c6', server: 'calc', tool: 'add' }),
    ).rejects.toThrow('unavailable');
  });

  it('refuses unknown servers and tools, a second host, and unregister by a non-host', async () => {
    const { host, caller } = await hostAndCaller();
    await expect(
      caller.request({ type: 'mcp.call', callId: 'x', server: 'nope', tool: 'add' }),
    ).rejects.toThrow('not_found');
    await expect(
      caller.request({ type: 'mcp.call', callId: 'x', server: 'calc', tool: 'mul' }),
    ).rejects.toThrow('not_found');
    await expect(caller.request({ type: 'mcp.register', server: 'calc', tools })).rejects.toThrow('conflict');
    await expect(caller.request({ type: 'mcp.unregister', server: 'calc' })).rejects.toThrow('forbidden');
    await expect(caller.request({ type: 'mcp.register', server: 'bad name', tools })).rejects.toThrow(
      'bad_request',
    );
    await expect(caller.request({ type: 'mcp.register', server: 'ok', tools: 'add' })).rejects.toThrow(
      'bad_request',
    );
    await expect(caller.request({ type: 'mcp.call', server: 'calc', tool: 'add' })).rejects.toThrow(
      'missing field "callId"',
    );
    await expect(caller.request({ type: 'mcp.result', callId: 'unknown', result: 1 })).rejects.toThrow(
      'not_found',
    );
    expect(await host.request({ type: 'mcp.unregister', server: 'calc' })).toMatchObject({
      type: 'mcp.unregistered',
    });
    expect((await caller.request({ type: 'mcp.list' })).servers).toEqual([]);
  });
});
