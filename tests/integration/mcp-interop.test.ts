/**
 * Issue 28 item 5, real MCP interop, with the official `@modelcontextprotocol/sdk` on both sides, across two
 * nodes with `ha.mcp` (one Postgres, one Redis): `hostMcpServer` runs the reference server
 * `@modelcontextprotocol/server-everything` over stdio and hosts its tools from node A; `connectMcp` serves
 * every tool of the mesh from node B to an SDK `Client` (in-memory transport). The client lists and calls
 * tools by their `<server>__<tool>` names; a host leaving mid-call, a revoked host and a result or
 * arguments over the frame bound end in clear MCP errors; hosts coming and going send
 * `notifications/tools/list_changed`.
 */
import { join } from 'node:path';
import type { MeshClient } from '@mesh-broker/sdk';
import { connectMcp, hostMcpServer, type McpHost } from '@mesh-broker/sdk/mcp';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { type CallToolResult, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterEach, describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import { useWorld } from '../contract/harness.js';
import type { TestMesh } from '../helpers/mesh.js';
import { waitFor } from '../helpers/wait.js';

const EVERYTHING = join(packageRoot(), 'node_modules/@modelcontextprotocol/server-everything/dist/index.js');

/** A server shaped to test the bounds, paging and list changes (tests/helpers/mcp-fixture-server.mjs). */
const FIXTURE = join(packageRoot(), 'tests/helpers/mcp-fixture-server.mjs');

const quiet = () => {};
const hosts: McpHost[] = [];
const mcpClients: Client[] = [];

afterEach(async () => {
  for (const client of mcpClients.splice(0)) await client.close().catch(() => {});
  for (const host of hosts.splice(0)) await host.close();
});

/** server-everything hosted as mesh server `name` by `client`. */
async function hostEverything(client: MeshClient, name: string, extra: { maxFrameBytes?: number } = {}) {
  const host = await hostMcpServer({
    client,
    command: process.execPath,
    args: [EVERYTHING, 'stdio'],
    server: name,
    stderr: 'ignore',
    log: quiet,
    ...extra,
  });
  hosts.push(host);
  return host;
}

async function hostFixture(client: MeshClient, name: string, args: string[] = []) {
  const host = await hostMcpServer({
    client,
    command: process.execPath,
    args: [FIXTURE, ...args],
    server: name,
    stderr: 'ignore',
    log: quiet,
  });
  hosts.push(host);
  return host;
}

/** An MCP SDK client on `connectMcp` over `client`, counting the list-changed notifications it gets. */
async function mcpClientOn(client: MeshClient) {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const connection = await connectMcp({ client, transport: serverSide, pollMs: 300, log: quiet });
  const mcp = new Client({ name: 'interop-test', version: '1.0.0' });
  const changes = { count: 0 };
  mcp.setNotificationHandler(ToolListChangedNotificationSchema, () => {
    changes.count++;
  });
  await mcp.connect(clientSide);
  mcpClients.push(mcp);
  return { mcp, connection, changes };
}

const names = async (mcp: Client) => (await mcp.listTools()).tools.map((t) => t.name);
const text = (result: unknown) => ((result as CallToolResult).content[0] as { text: string }).text;

describe('real MCP servers and clients on the mesh, two nodes with ha.mcp', () => {
  const world = useWorld('shared', { flag: 'ha.mcp', env: { PRESENCE_GRACE_MS: '1000' } });
  let mesh: TestMesh;

  const peers = async () => {
    mesh = await world.mesh(3);
    const hostPeer = await world.peer(world.a, mesh, mesh.members[0]!);
    const callerPeer = await world.peer(world.b, mesh, mesh.members[1]!);
    return { hostPeer, callerPeer };
  };

  it("lists server-everything's tools as <server>__<tool> with their input schemas, and calls them", async () => {
    const { hostPeer, callerPeer } = await peers();
    const host = await hostEverything(hostPeer, 'everything');
    expect(host.tools).toEqual(expect.arrayContaining(['echo', 'get-sum', 'trigger-long-running-operation']));
    const { mcp } = await mcpClientOn(callerPeer);

    const { tools } = await mcp.listTools();
    expect(tools.map((t) => t.name)).toEqual(
      expect.arrayContaining(['everything__echo', 'everything__get-sum']),
    );
    const sum = tools.find((t) => t.name === 'everything__get-sum')!;
    expect(Object.keys(sum.inputSchema.properties ?? {})).toEqual(['a', 'b']);

    expect(text(await mcp.callTool({ name: 'everything__get-sum', arguments: { a: 2, b: 40 } }))).toContain(
      '42',
    );
    expect(text(await mcp.callTool({ name: 'everything__echo', arguments: { message: 'hello mesh' } }))).toBe(
      'Echo: hello mesh',
    );
    // The host's own error (bad arguments) reaches the client as a tool error, with the server's reason.
    const bad = (await mcp.callTool({
      name: 'everything__get-sum',
      arguments: { a: 'x' },
    })) as CallToolResult;
    expect(bad.isError).toBe(true);
    // A name nobody hosts is a JSON-RPC error (the MCP spec's "unknown tool").
    await expect(mcp.callTool({ name: 'nobody__echo', arguments: {} })).rejects.toThrow(
      /unknown tool "nobody__echo"/,
    );
  });

  it('a host leaving mid-call ends the call at once with a host_left tool error', async () => {
    const { hostPeer, callerPeer } = await peers();
    await hostEverything(hostPeer, 'everything');
    const { mcp } = await mcpClientOn(callerPeer);
    const invoked = new Promise<void>((resolve) =>
      hostPeer.on('frame', (frame) => {
        if (frame.type === 'mcp.invoke') resolve();
      }),
    );
    const started = Date.now();
    const call = mcp.callTool({
      name: 'everything__trigger-long-running-operation',
      arguments: { duration: 20, steps: 2 },
    });
    await invoked;
    hostPeer.close();
    const result = (await call) as CallToolResult;
    expect(result.isError).toBe(true);
    expect(text(result)).toMatch(/^mesh: host_left/);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("a revoked host's call in flight fails, its tools leave the list (list_changed), and calls to them are unknown", async () => {
    const { hostPeer, callerPeer } = await peers();
    const host = await hostEverything(hostPeer, 'everything');
    const { mcp, changes } = await mcpClientOn(callerPeer);
    expect(await names(mcp)).toContain('everything__echo');
    const invoked = new Promise<void>((resolve) =>
      hostPeer.on('frame', (frame) => {
        if (frame.type === 'mcp.invoke') resolve();
      }),
    );
    const call = mcp.callTool({
      name: 'everything__trigger-long-running-operation',
      arguments: { duration: 20, steps: 2 },
    });
    await invoked;
    const revoked = await world.b.admin(
      `/admin/meshes/${mesh.meshId}/members/${mesh.members[0]!.pubkey}/revoke`,
      {
        method: 'POST',
      },
    );
    expect(revoked.status).toBeLessThan(300);
    const result = (await call) as CallToolResult;
    expect(result.isError).toBe(true);
    expect(text(result)).toMatch(/^mesh: host_left/);
    // The host's session was refused for good: hosting ended on its own.
    expect((await host.ended).reason).toBe('mesh-closed');
    await waitFor(() => changes.count > 0, { what: 'tools/list_changed after the revocation' });
    expect(await names(mcp)).not.toContain('everything__echo');
    await expect(mcp.callTool({ name: 'everything__echo', arguments: { message: 'x' } })).rejects.toThrow(
      /unknown tool/,
    );
  });

  it('hosts coming and going send tools/list_changed, and the list follows', async () => {
    const { hostPeer, callerPeer } = await peers();
    await hostEverything(hostPeer, 'first');
    const { mcp, changes } = await mcpClientOn(callerPeer);
    expect((await names(mcp)).filter((n) => n.startsWith('second__'))).toEqual([]);

    const secondPeer = await world.peer(world.b, mesh, mesh.members[2]!);
    const second = await hostEverything(secondPeer, 'second');
    await waitFor(() => changes.count >= 1, { what: 'list_changed after a host came' });
    expect(await names(mcp)).toEqual(expect.arrayContaining(['first__echo', 'second__echo']));
    expect(text(await mcp.callTool({ name: 'second__echo', arguments: { message: 'b' } }))).toBe('Echo: b');

    await second.close();
    await waitFor(() => changes.count >= 2, { what: 'list_changed after a host went' });
    const after = await names(mcp);
    expect(after).toContain('first__echo');
    expect(after.filter((n) => n.startsWith('second__'))).toEqual([]);
  });

  it('a result over the frame bound is a clear too_large error; arguments over it are refused before sending', async () => {
    const { hostPeer, callerPeer } = await peers();
    // The host's bound as if its node had MAX_FRAME_BYTES=4096: an echo of 5000 characters cannot go back.
    await hostEverything(hostPeer, 'everything', { maxFrameBytes: 4096 });
    const { mcp } = await mcpClientOn(callerPeer);
    const big = (await mcp.callTool({
      name: 'everything__echo',
      arguments: { message: 'x'.repeat(5000) },
    })) as CallToolResult;
    expect(big.isError).toBe(true);
    expect(text(big)).toMatch(
      /^mesh: too_large: the tool's result is \d+ bytes of JSON; a mesh frame holds at most 4096/,
    );

    await expect(
      mcp.callTool({ name: 'everything__echo', arguments: { message: 'y'.repeat(70 * 1024) } }),
    ).rejects.toThrow(/a mesh frame holds at most 65536/);
    // Neither closed a socket: the next call goes through.
    expect(text(await mcp.callTool({ name: 'everything__echo', arguments: { message: 'ok' } }))).toBe(
      'Echo: ok',
    );
    expect(callerPeer.connected && hostPeer.connected).toBe(true);
  });
  it("registers what the broker takes of a server's paged tool list, says what it left out, and follows its list changes", async () => {
    const { hostPeer, callerPeer } = await peers();
    const host = await hostFixture(hostPeer, 'fixture');
    // Read over four tools/list pages of 40: tools of the last pages are hosted too.
    expect(host.tools).toHaveLength(100);
    expect(host.tools).toEqual(expect.arrayContaining(['add-tool', 't0', 't98']));
    const reasons = Object.fromEntries(host.leftOut.map((t) => [t.name, t.reason]));
    expect(reasons['bad name!']).toMatch(/not a mesh tool name/);
    expect(reasons.huge).toMatch(/entry would pass 61440 bytes/);
    expect(reasons.t99).toMatch(/at most 100 tools per server/);
    expect(host.leftOut).toHaveLength(53);

    const { mcp, changes } = await mcpClientOn(callerPeer);
    expect(await names(mcp)).toHaveLength(100);
    // The server adds a tool and says so: the host registers again, the connect side's client hears of it.
    expect(text(await mcp.callTool({ name: 'fixture__add-tool', arguments: {} }))).toBe('added');
    await waitFor(() => changes.count > 0, { what: 'list_changed after the server added a tool' });
    expect(host.tools).toContain('late');
    expect(await names(mcp)).toContain('fixture__late');
    expect(text(await mcp.callTool({ name: 'fixture__late', arguments: {} }))).toBe('called late');
  });

  it("tools/list pages are the mesh's mcp.list pages (two servers of 40 KiB: two pages)", async () => {
    const { hostPeer, callerPeer } = await peers();
    await hostFixture(hostPeer, 'big-a', ['--big']);
    await hostFixture(hostPeer, 'big-b', ['--big']);
    const { mcp } = await mcpClientOn(callerPeer);
    const first = await mcp.listTools();
    expect(first.nextCursor).toBeDefined();
    const second = await mcp.listTools({ cursor: first.nextCursor });
    expect(second.nextCursor).toBeUndefined();
    expect(first.tools.map((t) => t.name)).toContain('big-a__b0');
    expect(second.tools.map((t) => t.name)).toContain('big-b__b19');
    expect(first.tools.length + second.tools.length).toBe(40);
  });
});
